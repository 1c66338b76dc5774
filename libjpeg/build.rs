//! Builds the libjpeg-turbo region decoder (csrc/jpeg_region.c) and sets
//! `cfg(stoker_libjpeg)` so the crate decodes with it, against one of:
//!
//! - with the feature `vendored` (the worker's `vendored-libjpeg`): libjpeg-turbo built from source
//!   by `turbojpeg-sys` (static, position independent, with its SIMD). The
//!   Python extension uses it: a shared object cannot take the non-PIC
//!   `libjpeg.a` that distributions ship.
//! - otherwise the system's headers and static `libjpeg.a`, when installed.
//!   Without them the worker decodes every JPEG with zune-jpeg; nothing
//!   else changes. `STOKER_NO_LIBJPEG=1` forces that.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rustc-check-cfg=cfg(stoker_libjpeg)");
    println!("cargo:rerun-if-changed=csrc/jpeg_region.c");
    println!("cargo:rerun-if-env-changed=STOKER_NO_LIBJPEG");
    if std::env::var_os("CARGO_FEATURE_VENDORED").is_some() {
        // turbojpeg-sys links its libturbojpeg.a, which holds the whole
        // libjpeg API, and names its headers' directory.
        let Some(include) = std::env::var_os("DEP_TURBOJPEG_INCLUDE") else {
            panic!("feature vendored: turbojpeg-sys named no include directory");
        };
        compile_region_decoder(&PathBuf::from(include));
        return;
    }
    if std::env::var_os("STOKER_NO_LIBJPEG").is_some() {
        println!("cargo:warning=STOKER_NO_LIBJPEG set: JPEGs decode with zune-jpeg only");
        return;
    }
    let include = ["/usr/include", "/usr/local/include"]
        .into_iter()
        .find(|d| Path::new(d).join("jpeglib.h").exists());
    let static_lib = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
        "/usr/local/lib",
    ]
    .into_iter()
    .find(|d| Path::new(d).join("libjpeg.a").exists());
    let (Some(include), Some(lib_dir)) = (include, static_lib) else {
        println!(
            "cargo:warning=libjpeg (libjpeg-turbo) headers or libjpeg.a not found: JPEGs decode with zune-jpeg only"
        );
        return;
    };
    compile_region_decoder(Path::new(include));
    // Static, so the binary runs on hosts without libjpeg.
    println!("cargo:rustc-link-search=native={lib_dir}");
    println!("cargo:rustc-link-lib=static=jpeg");
}

fn compile_region_decoder(include: &Path) {
    cc::Build::new()
        .file("csrc/jpeg_region.c")
        .include(include)
        .opt_level(2)
        .warnings(true)
        .compile("stoker_jpeg_region");
    println!("cargo:rustc-cfg=stoker_libjpeg");
}
