//! The build script of every bare-metal example (each Cargo.toml names it with `build`): puts the
//! example's memory.x where the linker finds it and links with the runtime's link.x.
//! cortex-m-rt's link.x includes memory.x itself; riscv-rt's does not, so it is passed too.
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::copy("memory.x", out.join("memory.x")).expect("memory.x is beside Cargo.toml");
    println!("cargo:rustc-link-search={}", out.display());
    if env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|arch| arch.starts_with("riscv")) {
        println!("cargo:rustc-link-arg=-Tmemory.x");
    }
    println!("cargo:rustc-link-arg=-Tlink.x");
    println!("cargo:rerun-if-changed=memory.x");
}
