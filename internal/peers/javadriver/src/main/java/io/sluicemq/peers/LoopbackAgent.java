package io.sluicemq.peers;

import java.io.ByteArrayInputStream;
import java.lang.instrument.ClassFileTransformer;
import java.lang.instrument.Instrumentation;
import java.security.ProtectionDomain;

import javassist.ClassPool;
import javassist.CtClass;
import javassist.CtConstructor;
import javassist.CtMethod;
import javassist.LoaderClassPath;

/**
 * A java agent for the Apache RocketMQ 4.9 name server and broker, and the 5.3 proxy:
 * they bind their listening sockets to the wildcard address and have no setting to change
 * that (4.9 has none; the 5.3 proxy's gRPC server binds with NettyServerBuilder.forPort).
 * The agent rewrites the places that bind, so the peers listen on the loopback address
 * only:
 * <ul>
 * <li>Netty's NioServerSocketChannel.doBind (the remoting servers), and the same class as
 * grpc-netty-shaded renames it (the 5.3 proxy's gRPC server): a wildcard address becomes
 * the loopback address with the same port;</li>
 * <li>the HA service's accept socket (4.9: HAService$AcceptSocketService, 5.3:
 * DefaultHAService$AcceptSocketService): its listen address becomes the loopback address
 * with the same port.</li>
 * </ul>
 */
public final class LoopbackAgent {
    private LoopbackAgent() {}

    private static final String NETTY = "io/netty/channel/socket/nio/NioServerSocketChannel";
    private static final String SHADED_NETTY = "io/grpc/netty/shaded/io/netty/channel/socket/nio/NioServerSocketChannel";
    private static final String HA = "org/apache/rocketmq/store/ha/HAService$AcceptSocketService";
    private static final String HA5 = "org/apache/rocketmq/store/ha/DefaultHAService$AcceptSocketService";

    /** Installs the transformer. */
    public static void premain(String args, Instrumentation inst) {
        inst.addTransformer(new ClassFileTransformer() {
            @Override
            public byte[] transform(ClassLoader loader, String name, Class<?> cls, ProtectionDomain pd, byte[] buf) {
                boolean netty = NETTY.equals(name) || SHADED_NETTY.equals(name);
                if (!netty && !HA.equals(name) && !HA5.equals(name)) {
                    return null;
                }
                try {
                    ClassPool pool = new ClassPool(true);
                    if (loader != null) {
                        pool.appendClassPath(new LoaderClassPath(loader));
                    }
                    CtClass cc = pool.makeClass(new ByteArrayInputStream(buf));
                    if (netty) {
                        CtMethod m = cc.getDeclaredMethod("doBind");
                        m.insertBefore("{ if ($1 instanceof java.net.InetSocketAddress"
                                + " && ((java.net.InetSocketAddress) $1).getAddress() != null"
                                + " && ((java.net.InetSocketAddress) $1).getAddress().isAnyLocalAddress()) {"
                                + " $1 = new java.net.InetSocketAddress(java.net.InetAddress.getLoopbackAddress(),"
                                + " ((java.net.InetSocketAddress) $1).getPort()); } }");
                    } else {
                        for (CtConstructor c : cc.getDeclaredConstructors()) {
                            c.insertAfter("{ this.socketAddressListen = new java.net.InetSocketAddress("
                                    + "java.net.InetAddress.getLoopbackAddress(),"
                                    + " ((java.net.InetSocketAddress) this.socketAddressListen).getPort()); }");
                        }
                    }
                    byte[] out = cc.toBytecode();
                    cc.detach();
                    System.err.println("loopback agent: rewrote " + name);
                    return out;
                } catch (Throwable e) {
                    System.err.println("loopback agent: cannot rewrite " + name + ": " + e);
                    return null;
                }
            }
        });
    }
}
