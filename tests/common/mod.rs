//! Loads the golden pgoutput captures of `tests/fixtures/captures/` (recorded from real
//! PostgreSQL 15 and 18 servers by `tests/support/capture/record.py`).

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

use std::path::{Path, PathBuf};

pub struct Capture {
    pub path: PathBuf,
    pub scenario: String,
    pub proto_version: u32,
    pub binary: bool,
    /// (lsn, message bytes)
    pub messages: Vec<(u64, Vec<u8>)>,
}

pub fn captures() -> Vec<Capture> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captures");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures/captures exists")
        .flat_map(|server| std::fs::read_dir(server.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no captures under {}", root.display());
    paths.into_iter().map(load).collect()
}

pub fn load(path: PathBuf) -> Capture {
    let text = std::fs::read_to_string(&path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let messages = json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let lsn = pgwire_cdc::lsn::parse_lsn(m["lsn"].as_str().unwrap()).unwrap();
            (lsn, hex::decode(m["data"].as_str().unwrap()).unwrap())
        })
        .collect();
    Capture {
        scenario: json["scenario"].as_str().unwrap().to_owned(),
        proto_version: json["proto_version"].as_u64().unwrap() as u32,
        binary: json["binary"].as_bool().unwrap(),
        messages,
        path,
    }
}
