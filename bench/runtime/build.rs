//! Tells the report which official SDK it measured: the `agent-client-protocol` version that
//! this crate's `Cargo.lock` resolved, so the tables cannot name another one.

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = std::fs::read_to_string("Cargo.lock").expect("bench/runtime/Cargo.lock is readable");
    let mut lines = lock.lines();
    let version = loop {
        let Some(line) = lines.next() else { panic!("Cargo.lock has no agent-client-protocol package") };
        if line == r#"name = "agent-client-protocol""# {
            let next = lines.next().unwrap_or_default();
            break next.trim_start_matches("version = \"").trim_end_matches('"').to_owned();
        }
    };
    println!("cargo:rustc-env=OFFICIAL_SDK_VERSION={version}");
}
