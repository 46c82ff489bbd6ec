//! docs/reference/config.md against the code. The page documents every key of
//! config.toml in tables of `| key | default | meaning |`; the code's keys come from the
//! JSON schema of the configuration types (schemars reads the same serde attributes the
//! parser obeys), so a key added to the code without a row, a row for a key that does not
//! exist, and a default that drifted all fail [`compare`].

use std::collections::BTreeMap;

use serde_json::Value;

use crate::markdown::{is_separator, table_row};

/// A row of the reference: a key, its documented default, what it means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentedKey {
    /// As written, e.g. `helpers.NAME.program`.
    pub key: String,
    pub default: DocumentedDefault,
    pub meaning: String,
    /// The `## ` heading the row is under.
    pub section: String,
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentedDefault {
    /// A TOML literal, written in backticks: what the code's default must equal.
    Literal(String),
    /// Words: the key has no value by default (required, or absent means something).
    Words(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReferenceError {
    #[error("line {line}: a key row needs three cells (key, default, meaning), found {found}")]
    Cells { line: usize, found: usize },
    #[error("line {line}: the key cell must be one key in backticks, found {cell:?}")]
    KeyCell { line: usize, cell: String },
    #[error("line {line}: key {key} is documented twice (first at line {first})")]
    Twice { line: usize, key: String, first: usize },
    #[error("the schema has a $ref {0:?} it does not define")]
    Ref(String),
}

/// The rows of every `| key | default | meaning |` table, in order.
pub fn parse(markdown: &str) -> Result<Vec<DocumentedKey>, ReferenceError> {
    let mut rows = Vec::new();
    let mut section = String::new();
    let mut in_table = false;
    let mut first_seen: BTreeMap<String, usize> = BTreeMap::new();
    for (index, line) in markdown.lines().enumerate() {
        let number = index + 1;
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim().to_owned();
        }
        let Some(cells) = table_row(line) else {
            in_table = false;
            continue;
        };
        if is_header(&cells) {
            in_table = true;
            continue;
        }
        if !in_table || is_separator(&cells) {
            continue;
        }
        if cells.len() != 3 {
            return Err(ReferenceError::Cells { line: number, found: cells.len() });
        }
        let key = single_code(&cells[0])
            .filter(|k| !k.is_empty() && !k.contains(char::is_whitespace))
            .ok_or_else(|| ReferenceError::KeyCell { line: number, cell: cells[0].clone() })?;
        if let Some(first) = first_seen.insert(normalize(&key), number) {
            return Err(ReferenceError::Twice { line: number, key, first });
        }
        let default = match single_code(&cells[1]) {
            Some(literal) => DocumentedDefault::Literal(literal),
            None => DocumentedDefault::Words(cells[1].clone()),
        };
        rows.push(DocumentedKey { key, default, meaning: cells[2].clone(), section: section.clone(), line: number });
    }
    Ok(rows)
}

fn is_header(cells: &[String]) -> bool {
    cells.len() == 3 && cells[0] == "key" && cells[1] == "default" && cells[2] == "meaning"
}

/// The text of a cell that is exactly one code span.
fn single_code(cell: &str) -> Option<String> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.contains('`')).then(|| inner.to_owned())
}

/// A key with its placeholders made uniform: an UPPERCASE segment (`NAME`, `HOST`) is
/// any name, written `*`.
pub fn normalize(key: &str) -> String {
    key.split('.')
        .map(|segment| {
            let name = segment.trim_end_matches("[]");
            let placeholder = name.chars().any(|c| c.is_ascii_uppercase())
                && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if placeholder { segment.replacen(name, "*", 1) } else { segment.to_owned() }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Every key a schema describes, normalized (`*` for a map's names, `[]` for an array of
/// tables), with its default when the code has one.
pub fn schema_keys(schema: &Value) -> Result<BTreeMap<String, Option<Value>>, ReferenceError> {
    let mut keys = BTreeMap::new();
    walk(schema, schema, "", &mut keys)?;
    Ok(keys)
}

fn walk(
    root: &Value,
    node: &Value,
    prefix: &str,
    out: &mut BTreeMap<String, Option<Value>>,
) -> Result<(), ReferenceError> {
    let node = resolve(root, node)?;
    let Some(properties) = node.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (name, property) in properties {
        let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        let default = property.get("default").filter(|d| !d.is_null()).cloned();
        let shape = resolve(root, without_null(root, property)?)?;
        if is_table(root, shape)? {
            walk(root, shape, &key, out)?;
        } else if let Some(values) = shape.get("additionalProperties").filter(|v| v.is_object()) {
            let values = resolve(root, without_null(root, values)?)?;
            if is_table(root, values)? {
                walk(root, values, &format!("{key}.*"), out)?;
            } else {
                out.insert(format!("{key}.*"), None);
            }
        } else if let Some(items) = shape.get("items").filter(|_| is_array(shape)) {
            let items = resolve(root, without_null(root, items)?)?;
            if is_table(root, items)? {
                walk(root, items, &format!("{key}[]"), out)?;
            } else {
                out.insert(key, default);
            }
        } else {
            out.insert(key, default);
        }
    }
    Ok(())
}

fn is_table(root: &Value, node: &Value) -> Result<bool, ReferenceError> {
    Ok(resolve(root, node)?.get("properties").is_some_and(Value::is_object))
}

fn is_array(node: &Value) -> bool {
    match node.get("type") {
        Some(Value::String(t)) => t == "array",
        Some(Value::Array(types)) => types.iter().any(|t| t == "array"),
        _ => false,
    }
}

/// An `Option<T>`'s schema is `T` or null (`anyOf`, or a type list): the `T`.
fn without_null<'a>(root: &'a Value, node: &'a Value) -> Result<&'a Value, ReferenceError> {
    let node = resolve(root, node)?;
    for combinator in ["anyOf", "oneOf"] {
        if let Some(options) = node.get(combinator).and_then(Value::as_array) {
            let not_null: Vec<&Value> =
                options.iter().filter(|o| o.get("type") != Some(&Value::from("null"))).collect();
            if let [only] = not_null.as_slice() {
                return Ok(only);
            }
        }
    }
    Ok(node)
}

fn resolve<'a>(root: &'a Value, node: &'a Value) -> Result<&'a Value, ReferenceError> {
    let mut node = node;
    // A $ref chain is short; the bound stops a schema that refers to itself.
    for _ in 0..16 {
        let Some(reference) = node.get("$ref").and_then(Value::as_str) else { return Ok(node) };
        let pointer = reference.strip_prefix('#').ok_or_else(|| ReferenceError::Ref(reference.to_owned()))?;
        node = root.pointer(pointer).ok_or_else(|| ReferenceError::Ref(reference.to_owned()))?;
    }
    Err(ReferenceError::Ref("a $ref chain longer than 16".to_owned()))
}

/// What is wrong between the page and the code, one line each; empty when they agree.
pub fn compare(documented: &[DocumentedKey], code: &BTreeMap<String, Option<Value>>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for row in documented {
        let key = normalize(&row.key);
        seen.insert(key.clone());
        let Some(code_default) = code.get(&key) else {
            problems
                .push(format!("line {}: `{}` is documented but the configuration has no such key", row.line, row.key));
            continue;
        };
        match (&row.default, code_default) {
            (DocumentedDefault::Literal(literal), Some(expected)) => match toml_literal(literal) {
                Ok(value) if &value == expected => {}
                Ok(_) => problems.push(format!(
                    "line {}: `{}` is documented with default `{literal}` but the code's is {expected}",
                    row.line, row.key
                )),
                Err(e) => problems.push(format!("line {}: `{}`: the default `{literal}` is not TOML: {e}", row.line, row.key)),
            },
            (DocumentedDefault::Words(words), Some(expected)) => problems.push(format!(
                "line {}: `{}` has default {expected} in the code: write it in backticks, not {words:?}",
                row.line, row.key
            )),
            (DocumentedDefault::Literal(literal), None) => problems.push(format!(
                "line {}: `{}` is documented with default `{literal}` but the code gives it none: say in words what its absence means",
                row.line, row.key
            )),
            (DocumentedDefault::Words(_), None) => {}
        }
        if row.meaning.trim().is_empty() {
            problems.push(format!("line {}: `{}` has no meaning written", row.line, row.key));
        }
    }
    for key in code.keys().filter(|k| !seen.contains(*k)) {
        problems.push(format!("`{key}` is in the configuration but not in docs/reference/config.md: add a row"));
    }
    problems
}

/// A TOML value written on its own, as JSON (the schema's defaults are JSON).
pub fn toml_literal(literal: &str) -> Result<Value, String> {
    let table: toml::Table = toml::from_str(&format!("v = {literal}")).map_err(|e| e.message().to_owned())?;
    let value = table.get("v").cloned().ok_or("no value")?;
    serde_json::to_value(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PAGE: &str = "\
# Config

## [restart]

| key | default | meaning |
|---|---|---|
| `restart.budget` | `10` | restarts allowed |
| `helpers.NAME.program` | none: next to cc-supervisor | the program |

Prose | with a pipe is not a row.

## [egress]

| key | default | meaning |
|---|---|---|
| `egress.allow` | `[\"a.example\"]` | hosts, e.g. `x|y` |
";

    fn code() -> BTreeMap<String, Option<Value>> {
        BTreeMap::from([
            ("restart.budget".to_owned(), Some(json!(10))),
            ("helpers.*.program".to_owned(), None),
            ("egress.allow".to_owned(), Some(json!(["a.example"]))),
        ])
    }

    #[test]
    fn rows_are_read_with_their_sections() {
        let rows = parse(PAGE).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].section, "[restart]");
        assert_eq!(rows[0].default, DocumentedDefault::Literal("10".into()));
        assert_eq!(rows[1].default, DocumentedDefault::Words("none: next to cc-supervisor".into()));
        assert_eq!(rows[2].meaning, "hosts, e.g. `x|y`");
        assert_eq!(rows[2].line, 16);
    }

    #[test]
    fn a_page_that_matches_the_code_has_no_problems() {
        assert_eq!(compare(&parse(PAGE).unwrap(), &code()), Vec::<String>::new());
    }

    #[test]
    fn an_undocumented_key_a_stray_row_and_a_drifted_default_are_each_named() {
        let mut code = code();
        code.insert("restart.budget".into(), Some(json!(11)));
        code.insert("terminals.max_terminals".into(), Some(json!(64)));
        code.remove("egress.allow");
        let problems = compare(&parse(PAGE).unwrap(), &code);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("`restart.budget` is documented with default `10` but the code's is 11"));
        assert!(problems[1].contains("`egress.allow` is documented but the configuration has no such key"));
        assert!(problems[2].contains("`terminals.max_terminals` is in the configuration but not in"));
    }

    #[test]
    fn a_default_in_words_where_the_code_has_one_is_a_problem() {
        let mut code = code();
        code.insert("helpers.*.program".into(), Some(json!("/bin/x")));
        let problems = compare(&parse(PAGE).unwrap(), &code);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("write it in backticks"));
    }

    #[test]
    fn a_key_twice_and_a_malformed_row_are_errors() {
        let twice = "| key | default | meaning |\n|---|---|---|\n| `a.b` | `1` | x |\n| `a.b` | `1` | y |\n";
        assert!(matches!(parse(twice), Err(ReferenceError::Twice { line: 4, .. })));
        let short = "| key | default | meaning |\n|---|---|---|\n| `a.b` | `1` |\n";
        assert_eq!(parse(short), Err(ReferenceError::Cells { line: 3, found: 2 }));
        let bare = "| key | default | meaning |\n|---|---|---|\n| a.b | `1` | x |\n";
        assert!(matches!(parse(bare), Err(ReferenceError::KeyCell { line: 3, .. })));
    }

    #[test]
    fn placeholders_are_uppercase_segments() {
        assert_eq!(normalize("helpers.NAME.program"), "helpers.*.program");
        assert_eq!(normalize("egress.resolve.HOST"), "egress.resolve.*");
        assert_eq!(normalize("credentials.static[].token"), "credentials.static[].token");
        assert_eq!(normalize("runs.claude_code.program"), "runs.claude_code.program");
    }

    #[test]
    fn the_schema_walk_finds_tables_maps_arrays_and_options() {
        let schema = json!({
            "type": "object",
            "properties": {
                "restart": { "$ref": "#/$defs/Restart", "default": { "budget": 10 } },
                "helpers": { "type": "object", "additionalProperties": { "$ref": "#/$defs/Helper" } },
                "resolve": { "type": "object", "additionalProperties": { "type": "array", "items": { "type": "string" } } },
                "static": { "type": "array", "items": { "$ref": "#/$defs/Token" } },
                "runner": { "anyOf": [ { "type": "string" }, { "type": "null" } ], "default": null },
                "app": { "anyOf": [ { "$ref": "#/$defs/Helper" }, { "type": "null" } ] }
            },
            "$defs": {
                "Restart": { "type": "object", "properties": { "budget": { "type": "integer", "default": 10 } } },
                "Helper": { "type": "object", "properties": { "args": { "type": "array", "items": { "type": "string" }, "default": [] } } },
                "Token": { "type": "object", "properties": { "token": { "type": "string" } } }
            }
        });
        let keys = schema_keys(&schema).unwrap();
        let expected: BTreeMap<String, Option<Value>> = BTreeMap::from([
            ("restart.budget".to_owned(), Some(json!(10))),
            ("helpers.*.args".to_owned(), Some(json!([]))),
            ("resolve.*".to_owned(), None),
            ("static[].token".to_owned(), None),
            ("runner".to_owned(), None),
            ("app.args".to_owned(), Some(json!([]))),
        ]);
        assert_eq!(keys, expected);
    }

    #[test]
    fn a_dangling_ref_is_an_error() {
        let schema = json!({ "properties": { "a": { "$ref": "#/$defs/Missing" } } });
        assert_eq!(schema_keys(&schema), Err(ReferenceError::Ref("#/$defs/Missing".into())));
    }

    #[test]
    fn toml_literals_compare_as_values() {
        assert_eq!(toml_literal("100").unwrap(), json!(100));
        assert_eq!(toml_literal("\"claude\"").unwrap(), json!("claude"));
        assert_eq!(toml_literal("[ ]").unwrap(), json!([]));
        assert!(toml_literal("not toml").is_err());
    }
}
