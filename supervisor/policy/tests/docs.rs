//! docs/concepts/command-policy.md states which package managers the command policy
//! covers; this keeps that list honest as managers are added.

#[test]
fn the_docs_name_every_package_manager_the_classifier_knows() {
    let readme = include_str!("../../../docs/concepts/command-policy.md");
    let section = readme
        .split("**Package managers covered**")
        .nth(1)
        .and_then(|rest| rest.split("\n- **").next())
        .expect("docs/concepts/command-policy.md has a \"Package managers covered\" item");
    let named: Vec<&str> =
        section.split(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c))).filter(|w| !w.is_empty()).collect();
    let missing: Vec<&str> =
        cc_policy::command::package_managers().iter().copied().filter(|m| !named.contains(m)).collect();
    assert!(missing.is_empty(), "docs/concepts/command-policy.md's package manager list lacks {missing:?}");
}
