//! Derives the tool registry from the file system, so it is never maintained by hand:
//! one tool per file in `src/tools/` (file `plan_read.rs` is tool `plan-read`, command
//! `forge.plan-read`). Helper modules live at the crate root, beside `tools/`.

use std::fs;
use std::path::Path;

fn main() {
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");

    let tools_dir = Path::new(&manifest).join("src/tools");
    println!("cargo:rerun-if-changed={}", tools_dir.display());
    let mut stems: Vec<String> = fs::read_dir(&tools_dir)
        .expect("src/tools")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .filter(|s| s != "mod")
        .collect();
    stems.sort();
    let mut code = String::new();
    for s in &stems {
        let path = tools_dir.join(format!("{s}.rs"));
        println!("cargo:rerun-if-changed={}", path.display());
        code.push_str(&format!("#[path = {:?}]\npub mod {s};\n", path.display().to_string()));
    }
    code.push_str("/// Every tool, in name order (derived from the files in `src/tools/`).\n");
    code.push_str("pub static TOOLS: &[ToolEntry] = &[\n");
    for s in &stems {
        let name = s.replace('_', "-");
        code.push_str(&format!(
            "    ToolEntry {{ name: {name:?}, description: {s}::DESCRIPTION, needs_server: {s}::NEEDS_SERVER, read_only: {s}::READ_ONLY, when_abandoned: {s}::WHEN_ABANDONED, schema: || schema_of::<{s}::Input>(), validate: |v| parse_input::<{s}::Input>(v).map(|_| ()), run: |v, ctx| {{ let input = parse_input::<{s}::Input>(v)?; {s}::execute(input, ctx) }} }},\n"
        ));
    }
    code.push_str("];\n");
    fs::write(Path::new(&out).join("tools_registry.rs"), code).expect("write registry");
}
