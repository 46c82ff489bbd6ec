//! gRPC server reflection for the client API socket, in both protocol versions that
//! clients speak (`grpc.reflection.v1`, and `v1alpha` for Python's `grpcio-reflection`,
//! Postman and older grpcurl), telling the truth about the socket: it lists exactly the
//! services served there, and describes only the files those services need. The helpers'
//! internal APIs (sandboxd, the runner, the broker, the gateway) are in the same
//! descriptor set but are neither listed nor described: they are not served here.

use std::collections::{BTreeSet, HashMap};

use prost::Message;
use prost_types::{FileDescriptorProto, FileDescriptorSet};

/// The reflection services' own names.
pub const REFLECTION_V1: &str = "grpc.reflection.v1.ServerReflection";
pub const REFLECTION_V1ALPHA: &str = "grpc.reflection.v1alpha.ServerReflection";

#[derive(Debug, thiserror::Error)]
pub enum ReflectionError {
    #[error("the descriptor set cannot be decoded: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("no descriptor declares the served service {0}")]
    Undeclared(String),
    #[error("reflection: {0}")]
    Build(#[from] tonic_reflection::server::Error),
}

/// The files that declare `services` (full names), with every file they import,
/// transitively: what a client needs to build requests for them, and nothing else.
pub fn served_files(set: FileDescriptorSet, services: &[&str]) -> Result<FileDescriptorSet, ReflectionError> {
    let by_name: HashMap<String, FileDescriptorProto> =
        set.file.into_iter().map(|f| (f.name.clone().unwrap_or_default(), f)).collect();
    let declares = |file: &FileDescriptorProto, service: &str| {
        let package = file.package.as_deref().unwrap_or_default();
        file.service.iter().any(|s| format!("{package}.{}", s.name.as_deref().unwrap_or_default()) == service)
    };
    let mut wanted: Vec<String> = Vec::new();
    for service in services {
        let file = by_name.values().find(|f| declares(f, service));
        wanted.push(file.ok_or_else(|| ReflectionError::Undeclared((*service).to_owned()))?.name().to_owned());
    }
    let mut kept = BTreeSet::new();
    while let Some(name) = wanted.pop() {
        if kept.insert(name.clone())
            && let Some(file) = by_name.get(&name)
        {
            wanted.extend(file.dependency.iter().cloned());
        }
    }
    // Dependencies first, as protoc orders a set.
    let mut ordered = Vec::new();
    let mut placed = BTreeSet::new();
    fn place(
        name: &str,
        by_name: &HashMap<String, FileDescriptorProto>,
        kept: &BTreeSet<String>,
        placed: &mut BTreeSet<String>,
        ordered: &mut Vec<FileDescriptorProto>,
    ) {
        if !kept.contains(name) || !placed.insert(name.to_owned()) {
            return;
        }
        if let Some(file) = by_name.get(name) {
            for dependency in &file.dependency {
                place(dependency, by_name, kept, placed, ordered);
            }
            ordered.push(file.clone());
        }
    }
    for name in &kept {
        place(name, &by_name, &kept, &mut placed, &mut ordered);
    }
    Ok(FileDescriptorSet { file: ordered })
}

/// The v1 and v1alpha reflection services, listing `services` (and themselves).
pub fn services(
    encoded_sets: &[&[u8]],
    services: &[&str],
) -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<impl tonic_reflection::server::v1::ServerReflection>,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    ReflectionError,
> {
    let mut all = FileDescriptorSet::default();
    for encoded in encoded_sets {
        all.file.extend(FileDescriptorSet::decode(*encoded)?.file);
    }
    // One copy of each file (google/protobuf/*.proto may come in more than one set).
    let mut seen = BTreeSet::new();
    all.file.retain(|f| seen.insert(f.name().to_owned()));
    let served = served_files(all, services)?;
    let builder = |listed: &str| {
        let mut builder = tonic_reflection::server::Builder::configure().register_file_descriptor_set(served.clone());
        for service in services {
            builder = builder.with_service_name(*service);
        }
        builder.with_service_name(listed)
    };
    Ok((builder(REFLECTION_V1).build_v1()?, builder(REFLECTION_V1ALPHA).build_v1alpha()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_served_services_files_and_their_imports_are_kept() {
        let set = FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).unwrap();
        let kept = served_files(set, &["cc.supervisor.v1.Runs"]).unwrap();
        let names: Vec<&str> = kept.file.iter().map(|f| f.name()).collect();
        assert!(names.contains(&"cc/supervisor/v1/runs.proto"), "{names:?}");
        assert!(names.contains(&"cc/tools/v1/tools.proto"), "{names:?}");
        assert!(names.contains(&"google/protobuf/timestamp.proto"), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("sandboxd") || n.contains("runner")), "{names:?}");
        // Every import comes before the file that imports it.
        for (i, file) in kept.file.iter().enumerate() {
            for dependency in &file.dependency {
                assert!(names[..i].contains(&dependency.as_str()), "{} before {dependency}", file.name());
            }
        }
        let set = FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).unwrap();
        assert!(matches!(served_files(set, &["cc.nope.v1.Nope"]), Err(ReflectionError::Undeclared(_))));
    }
}
