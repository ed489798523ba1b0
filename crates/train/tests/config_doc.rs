//! docs/CONFIG.md against the configuration structs: every key the
//! configuration has is documented, every documented key exists, and each
//! compressor's row names exactly its options. A key cannot be documented
//! without existing, or exist without being documented.

use std::collections::BTreeSet;

use gradcomp_compress::CompressorConfig;
use gradcomp_train::config::TrainConfig;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/CONFIG.md")).unwrap()
}

/// Every dotted leaf key of a serialized value (objects are tables).
fn leaves(prefix: &str, v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                leaves(&key, v, out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

/// The first cells of the key tables: `` | `data.batch_size` | ... `` (the
/// compressor table's rows are names, not keys).
fn documented_keys(doc: &str) -> BTreeSet<String> {
    let (keys, compressors) =
        doc.split_once("<!-- compressors -->").expect("the compressor table in CONFIG.md");
    let after_table =
        compressors.lines().skip_while(|l| !l.starts_with('|')).skip_while(|l| l.starts_with('|'));
    keys.lines()
        .chain(after_table)
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`').map(|(k, _)| k.to_string()))
        .filter(|k| !k.starts_with("compressor") || k == "compressor.name")
        .collect()
}

/// The compressor table's rows: name and the options its cell names.
fn compressor_rows(doc: &str) -> Vec<(String, BTreeSet<String>)> {
    let section = doc.split("<!-- compressors -->").nth(1).expect("the compressor table in CONFIG.md");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?.to_string();
            let options = cells.get(2)?.split('`').skip(1).step_by(2).map(str::to_string).collect();
            Some((name, options))
        })
        .collect()
}

#[test]
fn every_key_is_documented_and_every_documented_key_exists() {
    let doc = doc();
    let mut keys = BTreeSet::new();
    leaves("", &serde_json::to_value(TrainConfig::default()).unwrap(), &mut keys);
    // The compressor's options are per compressor (the table below); its name is a key.
    keys.retain(|k| !k.starts_with("compressor."));
    keys.insert("compressor.name".into());
    let documented = documented_keys(&doc);
    // A key is documented by its own row or by a row for a table that holds it
    // (`compression.warmup` documents its variants' fields).
    let covered = |k: &String| documented.iter().any(|d| k == d || k.starts_with(&format!("{d}.")));
    let undocumented: Vec<&String> = keys.iter().filter(|k| !covered(k)).collect();
    let unknown: Vec<&String> = documented
        .iter()
        .filter(|d| !keys.iter().any(|k| k == *d || k.starts_with(&format!("{d}."))))
        .collect();
    assert!(undocumented.is_empty(), "keys missing from docs/CONFIG.md: {undocumented:?}");
    assert!(unknown.is_empty(), "docs/CONFIG.md documents keys that do not exist: {unknown:?}");
}

#[test]
fn each_compressors_row_names_exactly_its_options() {
    let rows = compressor_rows(&doc());
    for name in CompressorConfig::NAMES {
        let mut options = BTreeSet::new();
        leaves("", &serde_json::to_value(CompressorConfig::named(name).unwrap()).unwrap(), &mut options);
        // Top-level option names (`wire.indices` is the option `wire`), less the tag.
        let options: BTreeSet<String> = options
            .iter()
            .map(|k| k.split('.').next().unwrap().to_string())
            .filter(|k| k != "name")
            .collect();
        let row =
            rows.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no row for {name} in CONFIG.md"));
        assert_eq!(row.1, options, "{name}: the options CONFIG.md names against the compressor's");
    }
}
