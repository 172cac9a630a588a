//! arrow-avro's columns turned into the column types of Spark's `from_avro` mapping (the
//! Python reference path's `arrow_type_of`), checking each value the way the reference path
//! does: a value it cannot turn into a Python object (a date or timestamp outside years
//! 1-9999, a time of day outside the day), a decimal wider than its precision, or a map
//! that repeats a key (a Python dict keeps one entry) is an error here, never an answer.
//!
//! | arrow-avro                       | column                                |
//! |----------------------------------|---------------------------------------|
//! | dictionary (enum)                | string                                |
//! | fixed_size_binary(16) (uuid)     | string (the canonical lowercase text) |
//! | fixed_size_binary(n) (fixed)     | binary                                |
//! | time32(ms) / time64(us)          | int32 / int64                         |
//! | timestamp(ms or us)              | timestamp(us), same zone presence     |
//! | dense union [null, T]            | T                                     |
//! | dense union [int, long] (+null)  | int64 (float, double: float64)        |
//! | other dense unions               | struct of member0, member1, ...       |

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type, Time32MillisecondType,
    Time64MicrosecondType, TimestampMicrosecondType, TimestampMillisecondType,
};
use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, ListArray, MapArray, PrimitiveArray, StructArray,
    TimestampMicrosecondArray, UInt32Array, UnionArray,
};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, TimeUnit};

/// Microseconds from the epoch to 0001-01-01T00:00 and to 9999-12-31T23:59:59.999999:
/// Python's datetime range.
const MIN_MICROS: i64 = -62_135_596_800_000_000;
const MAX_MICROS: i64 = 253_402_300_799_999_999;
/// Days from the epoch to 0001-01-01 and to 9999-12-31: Python's date range.
const MIN_DAYS: i32 = -719_162;
const MAX_DAYS: i32 = 2_932_896;
const MILLIS_PER_DAY: i32 = 86_400_000;
const MICROS_PER_DAY: i64 = 86_400_000_000;

type Result<T> = std::result::Result<T, String>;

/// `array` (a column arrow-avro decoded) as a column of `target`.
pub fn to_column(array: &ArrayRef, target: &DataType) -> Result<ArrayRef> {
    if let DataType::Union(..) = array.data_type() {
        return from_union(array.as_union(), target);
    }
    let source = array.data_type();
    match (source, target) {
        (DataType::Null, DataType::Null)
        | (DataType::Boolean, DataType::Boolean)
        | (DataType::Int32, DataType::Int32)
        | (DataType::Int64, DataType::Int64)
        | (DataType::Float32, DataType::Float32)
        | (DataType::Float64, DataType::Float64)
        | (DataType::Binary, DataType::Binary)
        | (DataType::Utf8, DataType::Utf8) => Ok(array.clone()),
        (DataType::FixedSizeBinary(_), DataType::Binary) => {
            let fixed = array.as_fixed_size_binary();
            let mut out = BinaryBuilder::with_capacity(fixed.len(), fixed.value_data().len());
            for row in 0..fixed.len() {
                if fixed.is_null(row) {
                    out.append_null();
                } else {
                    out.append_value(fixed.value(row));
                }
            }
            Ok(Arc::new(out.finish()))
        }
        (DataType::FixedSizeBinary(16), DataType::Utf8) => {
            let fixed = array.as_fixed_size_binary();
            let mut out = StringBuilder::with_capacity(fixed.len(), fixed.len() * 36);
            for row in 0..fixed.len() {
                if fixed.is_null(row) {
                    out.append_null();
                } else {
                    out.append_value(uuid_text(fixed.value(row)));
                }
            }
            Ok(Arc::new(out.finish()))
        }
        (DataType::Dictionary(key, value), DataType::Utf8)
            if **key == DataType::Int32 && **value == DataType::Utf8 =>
        {
            let dictionary = array.as_dictionary::<Int32Type>();
            let symbols = dictionary.values().as_string::<i32>();
            let mut out = StringBuilder::with_capacity(dictionary.len(), dictionary.len() * 8);
            for row in 0..dictionary.len() {
                if dictionary.is_null(row) {
                    out.append_null();
                } else {
                    out.append_value(symbols.value(dictionary.keys().value(row) as usize));
                }
            }
            Ok(Arc::new(out.finish()))
        }
        (DataType::Date32, DataType::Date32) => {
            let dates = array.as_primitive::<Date32Type>();
            check_range(dates, MIN_DAYS, MAX_DAYS, "date")?;
            Ok(array.clone())
        }
        (DataType::Time32(TimeUnit::Millisecond), DataType::Int32) => {
            let times = array.as_primitive::<Time32MillisecondType>();
            check_range(times, 0, MILLIS_PER_DAY - 1, "time-millis")?;
            Ok(Arc::new(Int32Array::new(times.values().clone(), times.nulls().cloned())))
        }
        (DataType::Time64(TimeUnit::Microsecond), DataType::Int64) => {
            let times = array.as_primitive::<Time64MicrosecondType>();
            check_range(times, 0, MICROS_PER_DAY - 1, "time-micros")?;
            Ok(Arc::new(Int64Array::new(times.values().clone(), times.nulls().cloned())))
        }
        (DataType::Timestamp(unit, zone), DataType::Timestamp(TimeUnit::Microsecond, target_zone))
            if zone.is_some() == target_zone.is_some() =>
        {
            let micros: ScalarBuffer<i64> = match unit {
                TimeUnit::Millisecond => {
                    let millis = array.as_primitive::<TimestampMillisecondType>();
                    let mut out = Vec::with_capacity(millis.len());
                    for (row, &value) in millis.values().iter().enumerate() {
                        match value.checked_mul(1000) {
                            Some(micros) => out.push(micros),
                            None if millis.is_null(row) => out.push(0),
                            None => return Err(format!("timestamp-millis {value} is out of range")),
                        }
                    }
                    out.into()
                }
                TimeUnit::Microsecond => array.as_primitive::<TimestampMicrosecondType>().values().clone(),
                _ => return Err(format!("cannot produce {target} from {source}")),
            };
            let out = TimestampMicrosecondArray::new(micros, array.nulls().cloned())
                .with_timezone_opt(target_zone.clone());
            check_range(&out, MIN_MICROS, MAX_MICROS, "timestamp")?;
            Ok(Arc::new(out))
        }
        (DataType::Decimal128(precision, scale), DataType::Decimal128(to_precision, to_scale))
            if precision == to_precision && scale == to_scale =>
        {
            array
                .as_primitive::<Decimal128Type>()
                .validate_decimal_precision(*precision)
                .map_err(|e| format!("{e}"))?;
            Ok(array.clone())
        }
        (DataType::List(_), DataType::List(field)) => {
            let list = array.as_list::<i32>();
            let values = to_column(list.values(), field.data_type())?;
            let out = ListArray::try_new(field.clone(), list.offsets().clone(), values, list.nulls().cloned())
                .map_err(|e| format!("{e}"))?;
            Ok(Arc::new(out))
        }
        (DataType::Map(_, _), DataType::Map(field, sorted)) => from_map(array.as_map(), field, *sorted),
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let record = array.as_struct();
            let mut columns = Vec::with_capacity(fields.len());
            for field in fields.iter() {
                let column = record
                    .column_by_name(field.name())
                    .ok_or_else(|| format!("no field {} was decoded", field.name()))?;
                columns.push(to_column(column, field.data_type())?);
            }
            if fields.is_empty() {
                return Ok(Arc::new(StructArray::new_empty_fields(record.len(), record.nulls().cloned())));
            }
            let out = StructArray::try_new(fields.clone(), columns, record.nulls().cloned())
                .map_err(|e| format!("{e}"))?;
            Ok(Arc::new(out))
        }
        _ => Err(format!("cannot produce {target} from {source}")),
    }
}

fn from_map(map: &MapArray, field: &arrow_schema::FieldRef, sorted: bool) -> Result<ArrayRef> {
    let DataType::Struct(entry_fields) = field.data_type() else {
        return Err(format!("map entries of type {}", field.data_type()));
    };
    if entry_fields.len() != 2 {
        return Err("map entries are not key and value".to_string());
    }
    let keys = map.keys();
    let key_text = keys.as_string_opt::<i32>().ok_or("map keys are not strings")?;
    let offsets = map.offsets();
    for row in 0..map.len() {
        let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
        if end - start > 1 && repeats_a_key(key_text, start, end) {
            return Err(format!("map at row {row} repeats a key"));
        }
    }
    let columns = vec![
        to_column(keys, entry_fields[0].data_type())?,
        to_column(map.values(), entry_fields[1].data_type())?,
    ];
    let entries = StructArray::try_new(entry_fields.clone(), columns, None).map_err(|e| format!("{e}"))?;
    let out = MapArray::try_new(field.clone(), offsets.clone(), entries, map.nulls().cloned(), sorted)
        .map_err(|e| format!("{e}"))?;
    Ok(Arc::new(out))
}

fn repeats_a_key(keys: &arrow_array::StringArray, start: usize, end: usize) -> bool {
    if end - start <= 16 {
        return (start..end).any(|i| (i + 1..end).any(|j| keys.value(i) == keys.value(j)));
    }
    let mut seen = HashSet::with_capacity(end - start);
    (start..end).any(|i| !seen.insert(keys.value(i)))
}

/// A dense union of the reader's branches (its null branch included) as the column of its
/// union: the one non-null branch, the widest number, or a struct of one member per branch.
fn from_union(union: &UnionArray, target: &DataType) -> Result<ArrayRef> {
    let DataType::Union(fields, _) = union.data_type() else { unreachable!() };
    let branches: Vec<(i8, &ArrayRef)> = fields
        .iter()
        .filter(|(_, field)| field.data_type() != &DataType::Null)
        .map(|(type_id, _)| (type_id, union.child(type_id)))
        .collect();
    let len = union.len();
    // The row's index in `branches` (None: the null branch).
    let chosen: Vec<Option<usize>> = (0..len)
        .map(|row| {
            let type_id = union.type_id(row);
            branches.iter().position(|(id, _)| *id == type_id)
        })
        .collect();
    let take = |branch: usize, target: &DataType| -> Result<ArrayRef> {
        let (type_id, child) = branches[branch];
        let indices: UInt32Array = (0..len)
            .map(|row| (union.type_id(row) == type_id).then(|| union.value_offset(row) as u32))
            .collect();
        let column = to_column(child, target)?;
        arrow_select::take::take(&column, &indices, None).map_err(|e| format!("{e}"))
    };
    let numeric = |data_type: &DataType| matches!(data_type, DataType::Int32 | DataType::Int64 | DataType::Float32 | DataType::Float64);
    match target {
        _ if branches.len() == 1 => take(0, target),
        DataType::Struct(members) if members.len() == branches.len() => {
            let columns = members
                .iter()
                .enumerate()
                .map(|(branch, member)| take(branch, member.data_type()))
                .collect::<Result<Vec<_>>>()?;
            let valid = NullBuffer::from(chosen.iter().map(Option::is_some).collect::<Vec<_>>());
            let nulls = (valid.null_count() > 0).then_some(valid);
            let out = StructArray::try_new(members.clone(), columns, nulls).map_err(|e| format!("{e}"))?;
            Ok(Arc::new(out))
        }
        DataType::Int64 | DataType::Float64 if branches.iter().all(|(_, child)| numeric(child.data_type())) => {
            widen(union, &branches, &chosen, target)
        }
        _ => Err(format!("cannot produce {target} from {}", union.data_type())),
    }
}

/// `[int, long]` as longs, `[float, double]` as doubles (nulls for the null branch).
fn widen(union: &UnionArray, branches: &[(i8, &ArrayRef)], chosen: &[Option<usize>], target: &DataType) -> Result<ArrayRef> {
    let len = union.len();
    let value = |row: usize, branch: usize| -> Result<f64> {
        let child = branches[branch].1;
        let at = union.value_offset(row);
        Ok(match child.data_type() {
            DataType::Float32 => child.as_primitive::<Float32Type>().value(at) as f64,
            DataType::Float64 => child.as_primitive::<Float64Type>().value(at),
            other => return Err(format!("a {other} branch in a union of doubles")),
        })
    };
    if target == &DataType::Float64 {
        let mut out = Float64Builder::with_capacity(len);
        for (row, branch) in chosen.iter().enumerate() {
            match branch {
                None => out.append_null(),
                Some(branch) => out.append_value(value(row, *branch)?),
            }
        }
        return Ok(Arc::new(out.finish()));
    }
    let mut out = Int64Builder::with_capacity(len);
    for (row, branch) in chosen.iter().enumerate() {
        let Some(branch) = branch else {
            out.append_null();
            continue;
        };
        let child = branches[*branch].1;
        let at = union.value_offset(row);
        match child.data_type() {
            DataType::Int32 => out.append_value(child.as_primitive::<Int32Type>().value(at) as i64),
            DataType::Int64 => out.append_value(child.as_primitive::<Int64Type>().value(at)),
            other => return Err(format!("a {other} branch in a union of longs")),
        }
    }
    Ok(Arc::new(out.finish()))
}

fn check_range<T>(array: &PrimitiveArray<T>, low: T::Native, high: T::Native, what: &str) -> Result<()>
where
    T: arrow_array::ArrowPrimitiveType,
    T::Native: PartialOrd + std::fmt::Display,
{
    for (row, value) in array.values().iter().enumerate() {
        if (*value < low || *value > high) && array.is_valid(row) {
            return Err(format!("{what} {value} is outside what Python's datetime holds"));
        }
    }
    Ok(())
}

/// A UUID's canonical text (lowercase, hyphenated): what Python's `str(uuid.UUID(...))` gives.
fn uuid_text(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(36);
    for (index, byte) in bytes.iter().enumerate() {
        if matches!(index, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(HEX[(byte >> 4) as usize] as char);
        text.push(HEX[(byte & 0xf) as usize] as char);
    }
    text
}
