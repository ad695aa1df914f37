//! Embeds the migrations: every `NNN_name.sql` in `../../migrations/`, in order.

use std::fs;
use std::path::Path;

fn main() {
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");

    let mig_dir = Path::new(&manifest).join("../../migrations");
    println!("cargo:rerun-if-changed={}", mig_dir.display());
    let mut migs: Vec<(u32, String, String)> = fs::read_dir(&mig_dir)
        .expect("migrations")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .filter_map(|p| {
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            let (num, name) = stem.split_once('_')?;
            Some((num.parse().ok()?, name.to_string(), p.canonicalize().ok()?.display().to_string()))
        })
        .collect();
    migs.sort();
    let mut m = String::from(
        "/// Embedded migrations `(version, name, sql)`, in order.\npub static MIGRATIONS: &[(u32, &str, &str)] = &[\n",
    );
    for (v, name, path) in &migs {
        println!("cargo:rerun-if-changed={path}");
        m.push_str(&format!("    ({v}, {name:?}, include_str!({path:?})),\n"));
    }
    m.push_str("];\n");
    fs::write(Path::new(&out).join("migrations.rs"), m).expect("write migrations");
}
