//! Gives libposixtrace.so the soname of its major version, as installed libraries have: C
//! analyzers linked against it keep working across compatible releases.
fn main() {
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libposixtrace.so.{major}");
}
