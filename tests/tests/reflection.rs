//! Server reflection on the client API socket, driven by a generic client of another
//! language: Python's official `grpcio-reflection` (which speaks `v1alpha` only) lists
//! the services, builds a request from the descriptors it fetched, calls `GetStatus`,
//! and reads an `ErrorInfo` reason from a refusal. `v1` lists the same services. Only
//! what the socket serves is listed or described.
//!
//! The Python side needs `grpcio`, `grpcio-reflection` and `grpcio-status`: `.ci/run`
//! puts them in a virtualenv and names its interpreter in `CC_GRPC_PYTHON`.

use std::collections::BTreeSet;
use std::process::Command;

use cc_tests::{Options, Supervisor};
use tokio_stream::StreamExt;

/// What the socket serves, and so all that reflection may list.
const SERVED: &[&str] = &[
    "cc.supervisor.v1.Conversations",
    "cc.supervisor.v1.Gate",
    "cc.supervisor.v1.Repositories",
    "cc.supervisor.v1.Rigs",
    "cc.supervisor.v1.Runs",
    "cc.supervisor.v1.Sandbox",
    "cc.supervisor.v1.System",
    "cc.supervisor.v1.Terminals",
    "cc.supervisor.v1.Workspaces",
    "grpc.health.v1.Health",
];

const CLIENT: &str = r#"
import json, sys
import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from google.rpc import error_details_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

# grpc-core names a unix socket's path as the HTTP/2 authority, which is not an
# authority, and the server's HTTP/2 stack resets such streams: say "localhost", as
# grpc-go and grpcurl do for unix sockets (the README says so for client authors).
channel = grpc.insecure_channel("unix://" + sys.argv[1], options=[("grpc.default_authority", "localhost")])
grpc.channel_ready_future(channel).result(timeout=10)
database = ProtoReflectionDescriptorDatabase(channel)
pool = descriptor_pool.DescriptorPool(database)

def call(service, method, fields):
    described = pool.FindServiceByName(service).methods_by_name[method]
    request = message_factory.GetMessageClass(described.input_type)
    response = message_factory.GetMessageClass(described.output_type)
    stub = channel.unary_unary("/%s/%s" % (service, method),
                               request_serializer=request.SerializeToString,
                               response_deserializer=response.FromString)
    return stub(json_format.ParseDict(fields, request()), timeout=10)

out = {"services": sorted(database.get_services())}
status = call("cc.supervisor.v1.System", "GetStatus", {})
out["status"] = json_format.MessageToDict(status, preserving_proto_field_name=True)
try:
    call("cc.supervisor.v1.Runs", "GetRun", {"run_id": "r-nope"})
except grpc.RpcError as error:
    out["code"] = error.code().name
    details = rpc_status.from_call(error)
    for detail in (details.details if details else []):
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            out["reason"] = {"reason": info.reason, "domain": info.domain, "metadata": dict(info.metadata)}
try:
    pool.FindServiceByName("cc.sandboxd.v1.Sandboxd")
    out["internal"] = "described"
except Exception:
    out["internal"] = "not described"
print(json.dumps(out))
"#;

/// An interpreter with the gRPC packages, or `None` (then the test is skipped, unless
/// `CC_REQUIRE_PRIVILEGED=1`, where it must run).
fn python() -> Option<String> {
    let candidates = std::env::var("CC_GRPC_PYTHON").into_iter().chain(["python3".to_owned()]);
    for python in candidates {
        let probe = Command::new(&python).args(["-c", "import grpc_reflection, grpc_status"]).output();
        if probe.is_ok_and(|out| out.status.success()) {
            return Some(python);
        }
    }
    if std::env::var("CC_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("no Python with grpcio-reflection and grpcio-status: set CC_GRPC_PYTHON (.ci/run does)");
    }
    eprintln!("skipping: no Python with grpcio-reflection and grpcio-status (set CC_GRPC_PYTHON)");
    None
}

#[test]
fn a_python_reflection_client_lists_describes_calls_and_reads_a_reason() {
    let Some(python) = python() else { return };
    let sup = Supervisor::start(Options::default());
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("client.py");
    std::fs::write(&script, CLIENT).unwrap();
    let out = Command::new(&python).arg(&script).arg(sup.api_socket()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let mut listed: Vec<&str> = SERVED.to_vec();
    listed.push("grpc.reflection.v1alpha.ServerReflection");
    listed.sort();
    assert_eq!(seen["services"], serde_json::json!(listed), "exactly what the socket serves");
    assert_eq!(seen["status"]["pid"], sup.child.id(), "{seen}");
    assert_eq!(seen["code"], "NOT_FOUND", "{seen}");
    assert_eq!(seen["reason"]["reason"], cc_proto::reasons::RUN_NOT_FOUND, "{seen}");
    assert_eq!(seen["reason"]["domain"], "cc.dev", "{seen}");
    assert_eq!(seen["reason"]["metadata"]["run_id"], "r-nope", "{seen}");
    assert_eq!(seen["internal"], "not described", "the helpers' internal APIs are not the socket's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_v1_lists_the_same_services() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

    let sup = Supervisor::start(Options::default());
    let channel = cc_proto::client::connect(&sup.api_socket()).await.unwrap();
    let ask = |request| ServerReflectionRequest { host: String::new(), message_request: Some(request) };
    let requests = vec![
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol("cc.sandboxd.v1.Sandboxd".into())),
    ];
    let mut answers = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let next = async |answers: &mut tonic::Streaming<ServerReflectionResponse>| answers.next().await.unwrap();

    let Ok(ServerReflectionResponse { message_response: Some(MessageResponse::ListServicesResponse(list)), .. }) =
        next(&mut answers).await
    else {
        panic!("no service list");
    };
    let listed: BTreeSet<String> = list.service.into_iter().map(|s| s.name).collect();
    let mut expected: BTreeSet<String> = SERVED.iter().map(|s| (*s).to_owned()).collect();
    expected.insert("grpc.reflection.v1.ServerReflection".into());
    assert_eq!(listed, expected);
    // An internal service is not described.
    let internal = next(&mut answers).await;
    assert!(
        matches!(
            &internal,
            Err(_) | Ok(ServerReflectionResponse { message_response: Some(MessageResponse::ErrorResponse(_)), .. })
        ),
        "{internal:?}"
    );
}
