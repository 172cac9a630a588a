//! Kafka Streams' `PositionSerde` (version 0) decoded exactly as
//! `spark_statestore.changelog.position_codec.decode_entries` decodes it: a value this
//! decoder accepts, that one accepts with the same entries, and every value it refuses goes
//! to the Python rules (which name what is wrong). A property test holds the two together.

use std::collections::HashMap;

/// `(topic, partition, offset)` entries of one `c` value, or Err(()) when it does not
/// decode (truncated, negative, bad UTF-8, an unknown serde version, a conflicting
/// duplicate).
pub fn decode_entries(data: &[u8]) -> Result<Vec<(&[u8], i32, i64)>, ()> {
    let size = data.len();
    if size == 0 || data[0] != 0 || size < 5 {
        return Err(());
    }
    let int32 = |at: usize| i32::from_be_bytes(data[at..at + 4].try_into().unwrap());
    let topics = int32(1);
    if topics < 0 {
        return Err(());
    }
    if topics == 0 {
        return Ok(Vec::new());
    }
    let mut pos = 5usize;
    if (topics as usize) * 9 > size - pos {
        return Err(());
    }
    let mut entries = Vec::new();
    for _ in 0..topics {
        if pos + 4 > size {
            return Err(());
        }
        let name_length = int32(pos);
        pos += 4;
        if name_length <= 0 {
            return Err(());
        }
        let name_end = pos + name_length as usize;
        if name_end + 4 > size {
            return Err(());
        }
        let name = &data[pos..name_end];
        if std::str::from_utf8(name).is_err() {
            return Err(());
        }
        let count = int32(name_end);
        pos = name_end + 4;
        if count < 0 {
            return Err(());
        }
        let end = pos + count as usize * 12;
        if end > size {
            return Err(());
        }
        for at in (pos..end).step_by(12) {
            let partition = int32(at);
            let offset = i64::from_be_bytes(data[at + 4..at + 12].try_into().unwrap());
            if partition < 0 || offset < 0 {
                return Err(());
            }
            entries.push((name, partition, offset));
        }
        pos = end;
    }
    if entries.len() > 1 {
        entries.sort();
        let mut unique: Vec<(&[u8], i32, i64)> = Vec::with_capacity(entries.len());
        for entry in entries {
            if let Some(previous) = unique.last() {
                if previous.0 == entry.0 && previous.1 == entry.1 {
                    if previous.2 != entry.2 {
                        return Err(());
                    }
                    continue;
                }
            }
            unique.push(entry);
        }
        return Ok(unique);
    }
    Ok(entries)
}

/// The merge of many records' positions: the largest offset per topic-partition.
#[derive(Default)]
pub struct Merged {
    pub offsets: HashMap<Vec<u8>, HashMap<i32, i64>>,
    pub without: usize,
}

impl Merged {
    pub fn add(&mut self, entries: &[(&[u8], i32, i64)]) {
        for &(topic, partition, offset) in entries {
            let partitions = match self.offsets.get_mut(topic) {
                Some(partitions) => partitions,
                None => self.offsets.entry(topic.to_vec()).or_default(),
            };
            let slot = partitions.entry(partition).or_insert(offset);
            if offset > *slot {
                *slot = offset;
            }
        }
    }
}
