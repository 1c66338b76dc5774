//! Builds the libjpeg-turbo region decoder (csrc/jpeg_region.c) when the
//! libjpeg headers and library are installed, and sets `cfg(stoker_libjpeg)`
//! so the worker uses it. Without them the worker decodes every JPEG with
//! zune-jpeg; nothing else changes. `STOKER_NO_LIBJPEG=1` forces that.

use std::path::Path;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(stoker_libjpeg)");
    println!("cargo:rerun-if-changed=csrc/jpeg_region.c");
    println!("cargo:rerun-if-env-changed=STOKER_NO_LIBJPEG");
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
    cc::Build::new()
        .file("csrc/jpeg_region.c")
        .include(include)
        .opt_level(2)
        .warnings(true)
        .compile("stoker_jpeg_region");
    // Static, so the binary runs on hosts without libjpeg.
    println!("cargo:rustc-link-search=native={lib_dir}");
    println!("cargo:rustc-link-lib=static=jpeg");
    println!("cargo:rustc-cfg=stoker_libjpeg");
}
