//! docs/reference/config.md documents every key of config.toml, with the code's default:
//! a key added to the configuration without a row there fails here.

use std::collections::BTreeMap;

use cc_package::config_reference::{compare, parse, schema_keys};
use cc_package::man::CONFIG_REFERENCE;
use cc_package::markdown::fences;
use serde_json::Value;

/// Every key of config.toml: the supervisor's, with `[credentials]` read from the
/// broker's types (the supervisor only hands that table over).
fn code_keys() -> BTreeMap<String, Option<Value>> {
    let supervisor = serde_json::to_value(schemars::schema_for!(cc_config::Config)).unwrap();
    let credentials = serde_json::to_value(schemars::schema_for!(cc_broker::config::CredentialsConfig)).unwrap();
    let mut keys = schema_keys(&supervisor).unwrap();
    assert!(keys.remove("credentials").is_some(), "the supervisor's schema lost its [credentials] table");
    for (key, default) in schema_keys(&credentials).unwrap() {
        keys.insert(format!("credentials.{key}"), default);
    }
    keys
}

#[test]
fn every_key_of_the_configuration_is_documented_with_its_default() {
    let documented = parse(CONFIG_REFERENCE).unwrap();
    let code = code_keys();
    // The walk itself is sound: it found keys of every kind of table.
    for key in ["restart.budget", "helpers.*.program", "egress.resolve.*", "credentials.static[].token", "runner"] {
        assert!(code.contains_key(key), "the schema walk missed {key}: {:#?}", code.keys());
    }
    let problems = compare(&documented, &code);
    assert!(problems.is_empty(), "docs/reference/config.md and the code disagree:\n{}", problems.join("\n"));
}

#[test]
fn every_toml_example_in_the_reference_is_a_valid_configuration() {
    let blocks: Vec<_> = fences(CONFIG_REFERENCE).unwrap().into_iter().filter(|f| f.info == "toml").collect();
    assert!(!blocks.is_empty(), "the reference shows no example config.toml");
    for block in blocks {
        // rules.toml examples are the gate's, not config.toml: they name themselves.
        if block.body.trim_start().starts_with("# rules.toml") {
            continue;
        }
        if let Err(e) = cc_config::Config::parse(&block.body) {
            panic!("docs/reference/config.md line {}: the example is not a valid config.toml: {e}", block.line);
        }
    }
}
