//! Clusters, clouds and infrastructure tools, classified by verb: a verb that reads is
//! read-only, one that changes local configuration is a mutation, and every other verb,
//! known to write or not known at all, changes remote state. The lists are in the README.

use super::super::Part;
use super::super::classify::operand_words as words;
use super::super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

fn remote(part: &mut Part, what: String) {
    part.add(C::RemoteMutation, what);
    part.effects.insert(E::AccessNetwork);
}

fn reads(part: &mut Part) {
    part.add(C::ReadOnly, "");
    part.effects.insert(E::AccessNetwork);
}

/// Verbs that only read, whatever the tool (`list`, `describe`, `get-…`, `show`).
fn is_read_verb(v: &str) -> bool {
    matches!(
        v,
        "" | "list"
            | "ls"
            | "get"
            | "describe"
            | "show"
            | "view"
            | "info"
            | "status"
            | "version"
            | "help"
            | "logs"
            | "log"
            | "history"
            | "search"
            | "whoami"
            | "explain"
            | "top"
            | "inspect"
            | "tail"
            | "output"
            | "outputs"
            | "validate"
            | "plan"
            | "preview"
            | "diff"
            | "graph"
            | "providers"
            | "template"
            | "lint"
            | "about"
            | "presign"
            | "wait"
            | "query"
            | "scan"
            | "can-i"
            | "cluster-info"
            | "api-resources"
            | "api-versions"
            | "env"
            | "print-access-token"
            | "print-identity-token"
    ) || ["describe-", "list-", "get-", "head-", "lookup-", "search-", "show-", "check-", "validate-"]
        .iter()
        .any(|p| v.starts_with(p))
}

pub fn kubectl(args: &[Arg], part: &mut Part) {
    let w = words(
        args,
        &[
            "-n",
            "--namespace",
            "--context",
            "--cluster",
            "--user",
            "-l",
            "--selector",
            "-o",
            "--output",
            "-f",
            "--filename",
            "-c",
            "--container",
            "--kubeconfig",
            "-s",
            "--server",
        ],
    );
    let verb = w.first().copied().unwrap_or("");
    match verb {
        "config" => match w.get(1).copied().unwrap_or("") {
            "" | "view" | "get-contexts" | "current-context" | "get-clusters" | "get-users" => {
                part.add(C::ReadOnly, "")
            }
            v => part.add(C::Mutation, format!("kubectl config {v} changes the kubeconfig")),
        },
        "auth" if w.get(1) == Some(&"can-i") || w.get(1) == Some(&"whoami") => reads(part),
        "rollout" if matches!(w.get(1).copied(), Some("status" | "history")) => reads(part),
        "port-forward" | "proxy" => {
            part.add(C::Mutation, format!("kubectl {verb} opens a local port into the cluster"));
            part.effects.insert(E::AccessNetwork);
        }
        "completion" | "plugin" => part.add(C::ReadOnly, ""),
        // The client's own version, without asking the server for its.
        "version" if args.iter().any(|a| a.text == "--client" || a.text == "--client=true") => {
            part.add(C::ReadOnly, "")
        }
        v if is_read_verb(v) || v == "events" => reads(part),
        v => remote(part, format!("kubectl {v} changes a cluster")),
    }
}

pub fn helm(args: &[Arg], part: &mut Part) {
    let w =
        words(args, &["-n", "--namespace", "--kube-context", "-f", "--values", "--set", "--version", "-o", "--output"]);
    match (w.first().copied().unwrap_or(""), w.get(1).copied().unwrap_or("")) {
        ("repo", "add" | "update" | "remove" | "rm" | "index") | ("plugin", _) | ("registry", _) => {
            part.add(C::Mutation, "helm changes its local configuration")
        }
        ("dependency" | "dep", "update" | "build") => {
            part.add(C::Mutation, "helm fetches chart dependencies");
            part.effects.insert(E::InstallPackage);
        }
        ("template" | "lint", _) if args.iter().any(|a| a.text.starts_with("--dependency-update")) => {
            part.add(C::Mutation, "helm fetches chart dependencies");
            part.effects.insert(E::InstallPackage);
        }
        ("pull" | "fetch" | "package" | "create", _) => part.add(C::Mutation, "helm writes files"),
        // A chart in a directory renders and lints here; one named in a repository or a
        // registry is fetched first.
        ("template" | "lint", _) if local_chart(args, w.get(1..).unwrap_or(&[])) => part.add(C::ReadOnly, ""),
        ("version" | "env" | "completion", _) => part.add(C::ReadOnly, ""),
        ("repo" | "dependency" | "dep", _) | ("get" | "show" | "inspect", _) => reads(part),
        (v, _) if is_read_verb(v) || v == "completion" => reads(part),
        (v, _) => remote(part, format!("helm {v} changes a cluster or a registry")),
    }
}

/// `helm template|lint` operands that are all directories (`./chart`, `chart`), with no
/// repository, registry or dependency update asked for.
fn local_chart(args: &[Arg], operands: &[&str]) -> bool {
    let fetches = args
        .iter()
        .any(|a| a.text.starts_with("--repo") || a.text.starts_with("--dependency-update") || a.text == "--devel");
    let local = |o: &&str| {
        !o.contains("://") && (o.starts_with('.') || o.starts_with('/') || !o.contains('/')) && !o.ends_with(".tgz")
    };
    !fetches && operands.iter().all(local)
}

/// terraform, tofu, terragrunt.
pub fn terraform(name: &str, args: &[Arg], part: &mut Part) {
    let w = words(args, &["-chdir", "-var", "-var-file", "-target", "-out", "-state", "-lock-timeout"]);
    match (w.first().copied().unwrap_or(""), w.get(1).copied().unwrap_or("")) {
        ("init" | "get", _) => {
            part.add(C::Mutation, format!("{name} init downloads providers and modules"));
            part.effects.insert(E::InstallPackage);
        }
        // Formatting and validating read only the configuration here.
        ("fmt", _) if !args.iter().any(|a| a.text == "-check") => {
            part.add(C::Mutation, format!("{name} fmt rewrites files"))
        }
        ("fmt" | "validate", _) => part.add(C::ReadOnly, ""),
        ("plan", _) if args.iter().any(|a| a.text.starts_with("-out")) => {
            part.add(C::Mutation, format!("{name} plan -out writes a plan file"));
            part.effects.insert(E::WriteFile);
            part.effects.insert(E::AccessNetwork);
        }
        ("workspace", "list" | "show")
        | ("state", "list" | "show" | "pull")
        | ("console" | "version" | "metadata", _) => reads(part),
        ("workspace", v) => part.add(C::Mutation, format!("{name} workspace {v}")),
        (v, _) if is_read_verb(v) => reads(part),
        (v, _) => remote(part, format!("{name} {v} changes infrastructure")),
    }
}

pub fn pulumi(args: &[Arg], part: &mut Part) {
    let w = words(args, &["-s", "--stack", "-C", "--cwd", "--config-file"]);
    match (w.first().copied().unwrap_or(""), w.get(1).copied().unwrap_or("")) {
        ("config", "set" | "rm" | "set-all" | "rm-all" | "cp" | "refresh") => {
            part.add(C::Mutation, "pulumi config changes the stack's settings")
        }
        ("stack", "" | "ls" | "output" | "history" | "export" | "graph" | "tag") | ("config", _) => reads(part),
        ("stack", "select") => part.add(C::Mutation, "pulumi stack select"),
        (v, _) if is_read_verb(v) => reads(part),
        (v, _) => remote(part, format!("pulumi {v} changes infrastructure")),
    }
}

pub fn aws(args: &[Arg], part: &mut Part) {
    let w = words(args, &["--region", "--profile", "--output", "--query", "--endpoint-url", "--cli-input-json"]);
    let (service, op) = (w.first().copied().unwrap_or(""), w.get(1).copied().unwrap_or(""));
    match (service, op) {
        ("configure", _) | ("sso", "login" | "logout") => part.add(C::Mutation, "aws changes its local configuration"),
        ("s3", "cp" | "mv" | "sync") => {
            // To a bucket changes remote state; from a bucket writes local files.
            let destination = w.last().copied().unwrap_or("");
            if destination.starts_with("s3://") {
                remote(part, format!("aws s3 {op} writes to {destination}"));
            } else {
                part.add(C::Mutation, format!("aws s3 {op} writes local files"));
                part.effects.insert(E::WriteFile);
                part.effects.insert(E::AccessNetwork);
            }
            if op == "mv" && w.iter().skip(2).any(|x| x.starts_with("s3://")) {
                remote(part, "aws s3 mv deletes from a bucket".into());
            }
        }
        ("s3", "ls" | "presign" | "") | ("sts", _) | ("help" | "--version" | "", _) => reads(part),
        ("logs", "tail") => reads(part),
        (_, v) if is_read_verb(v) => reads(part),
        (s, v) => remote(part, format!("aws {s} {v} changes cloud resources")),
    }
}

/// gcloud, az, doctl and the like: the verb is somewhere among the group words.
pub fn grouped_cli(name: &str, args: &[Arg], part: &mut Part) {
    let w = words(
        args,
        &[
            "--project",
            "--region",
            "--zone",
            "--format",
            "--filter",
            "-g",
            "--resource-group",
            "--subscription",
            "--output",
            "-o",
            "--query",
            "--context",
            "-t",
            "--access-token",
            "--account",
            "--configuration",
        ],
    );
    let local_config = matches!(
        w.first().copied(),
        Some("config" | "auth" | "login" | "logout" | "account" | "init" | "components" | "extension")
    ) && !w.iter().any(|v| {
        matches!(*v, "list" | "show" | "get-value" | "print-access-token" | "print-identity-token" | "describe")
    });
    if local_config {
        part.add(C::Mutation, format!("{name} {} changes its local configuration", w.join(" ")));
        return;
    }
    if w.iter().any(|v| matches!(*v, "ssh" | "scp" | "run-command" | "exec" | "console")) {
        remote(part, format!("{name} runs commands on a remote machine"));
        return;
    }
    match w.last().copied() {
        Some(v) if is_read_verb(v) => reads(part),
        None => reads(part),
        Some(v) if w.iter().any(|x| is_read_verb(x) && !x.is_empty()) && !is_write_verb(v) => reads(part),
        Some(v) => remote(part, format!("{name} {v} changes cloud resources")),
    }
}

fn is_write_verb(v: &str) -> bool {
    matches!(
        v,
        "create"
            | "delete"
            | "update"
            | "deploy"
            | "set"
            | "add"
            | "remove"
            | "patch"
            | "import"
            | "start"
            | "stop"
            | "restart"
            | "reset"
            | "resize"
            | "submit"
            | "run"
            | "enable"
            | "disable"
            | "apply"
            | "rollback"
            | "promote"
            | "cancel"
            | "destroy"
            | "up"
            | "upload"
            | "sync"
            | "purge"
            | "assign"
            | "grant"
            | "revoke"
            | "attach"
            | "detach"
            | "scale"
            | "publish"
            | "push"
            | "release"
            | "rm"
            | "mv"
            | "cp"
    ) || ["add-", "remove-", "set-", "create-", "delete-", "update-"].iter().any(|p| v.starts_with(p))
}

/// Deploy tools: anything but their reading verbs deploys.
pub fn deployer(name: &str, args: &[Arg], part: &mut Part) {
    let w = words(args, &["--app", "-a", "--config", "-c", "--scope", "--token", "--env", "-e", "--project"]);
    let verb = w.first().copied().unwrap_or("");
    match verb {
        // Run bare, these deploy the directory they are in.
        "" if matches!(name, "vercel" | "surge") => remote(part, format!("{name} deploys")),
        "login" | "logout" | "link" | "init" | "dev" | "build" | "auth" | "config" => {
            part.add(C::Mutation, format!("{name} {verb}"))
        }
        v if is_read_verb(v) || matches!(v, "whoami" | "--version" | "apps" | "regions" | "docs") => reads(part),
        v => remote(part, format!("{name} {v} changes a deployment")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(f: impl Fn(&[Arg], &mut Part), words: &str) -> Vec<C> {
        let args: Vec<Arg> = words.split_whitespace().map(Arg::word).collect();
        let mut part = Part::default();
        f(&args, &mut part);
        part.effective_classes().into_iter().collect()
    }

    #[test]
    fn verbs_decide() {
        assert_eq!(class(kubectl, "get pods -n x"), [C::ReadOnly]);
        assert_eq!(class(kubectl, "apply -f x.yaml"), [C::RemoteMutation]);
        assert_eq!(class(kubectl, "config use-context prod"), [C::Mutation]);
        assert_eq!(class(kubectl, "rollout status deploy/x"), [C::ReadOnly]);
        assert_eq!(class(|a, p| terraform("terraform", a, p), "apply -auto-approve"), [C::RemoteMutation]);
        assert_eq!(class(|a, p| terraform("terraform", a, p), "plan"), [C::ReadOnly]);
        assert_eq!(class(pulumi, "up --yes"), [C::RemoteMutation]);
        assert_eq!(class(aws, "s3 cp x s3://bucket/x"), [C::RemoteMutation]);
        assert_eq!(class(aws, "s3 cp s3://bucket/x ."), [C::Mutation]);
        assert_eq!(class(aws, "ec2 describe-instances --region x"), [C::ReadOnly]);
        assert_eq!(class(aws, "ec2 terminate-instances --instance-ids i-1"), [C::RemoteMutation]);
        assert_eq!(class(|a, p| grouped_cli("gcloud", a, p), "compute instances create vm1"), [C::RemoteMutation]);
        assert_eq!(class(|a, p| grouped_cli("gcloud", a, p), "compute instances list"), [C::ReadOnly]);
        assert_eq!(class(|a, p| grouped_cli("gcloud", a, p), "config set project x"), [C::Mutation]);
        assert_eq!(class(|a, p| grouped_cli("az", a, p), "vm delete -g rg -n vm"), [C::RemoteMutation]);
    }
}
