// A real HDFS for tests: Hadoop's MiniDFSCluster (one NameNode, one DataNode, one JVM) on
// loopback, from the hadoop-client-minicluster jar plus PySpark's own jars. Run as a Java
// single-file program (tests/hdfs/__init__.py): java -cp JARS MiniHdfs.java BASE_DIR.
// Prints "READY <rpc port> <http port>" once the DataNode has registered, then serves until
// its standard input closes (the test process ended), and shuts the cluster down.

import java.io.File;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public class MiniHdfs {
    public static void main(String[] args) throws Exception {
        Configuration conf = new Configuration();
        conf.set("hdfs.minidfs.basedir", args[0]);
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.namenode.http-bind-host", "127.0.0.1");
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, new File(args[0]))
            .numDataNodes(1)
            .build();
        try {
            cluster.waitActive();
            System.out.println("READY " + cluster.getNameNodePort() + " "
                + cluster.getNameNode().getHttpAddress().getPort());
            System.out.flush();
            while (System.in.read() != -1) {
                // serve until the parent closes our standard input
            }
        } finally {
            cluster.shutdown();
        }
    }
}
