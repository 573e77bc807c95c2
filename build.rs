//! Compiles the one piece of the C API that Rust cannot define on stable: the variadic
//! `SCR_Configf` formatter (see `csrc/configf.c` and `src/capi.rs`).
fn main() {
    println!("cargo:rerun-if-changed=csrc/configf.c");
    cc::Build::new().file("csrc/configf.c").warnings(true).compile("scr_configf");
}
