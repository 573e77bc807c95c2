//! Compiles the one piece of the C API that Rust cannot define on stable: the variadic
//! `SCR_Configf` formatter (see `csrc/configf.c` and `src/capi.rs`), and names `libscr.so`
//! (its SONAME), so a program or `libscrf.so` linked against it by path records `libscr.so`.
fn main() {
    println!("cargo:rerun-if-changed=csrc/configf.c");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libscr.so");
    cc::Build::new().file("csrc/configf.c").warnings(true).compile("scr_configf");
}
