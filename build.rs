//! Links the release `picogent` binary with its functions in the order of `bench/picogent.order`:
//! the code an agent runs while it starts and waits comes first, packed together, instead of
//! spread over the whole 23 MB of machine code. The kernel maps a program's code in blocks of 64
//! KiB and more as it is first run, so scattered code keeps most of the binary resident: with the
//! order, an idle agent maps a fraction of it (docs/performance.md, "Memory"). `bench/order.py`
//! writes the file from a profile of the release binary.
//!
//! Only where the linker is known to be LLD, the default for `x86_64-unknown-linux-gnu` since Rust
//! 1.90 (GNU ld has no such option), and never for debug builds. A stale file costs nothing but
//! the effect: names it lists that the binary lacks are skipped. `PICOGENT_LINK_ORDER=0` turns it
//! off.

use std::env;
use std::path::Path;

const ORDER_FILE: &str = "bench/picogent.order";

fn main() {
    println!("cargo::rerun-if-changed={ORDER_FILE}");
    println!("cargo::rerun-if-env-changed=PICOGENT_LINK_ORDER");
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    let var = |name: &str| env::var(name).unwrap_or_default();
    let rustflags = var("CARGO_ENCODED_RUSTFLAGS");
    // A linker of the user's choosing may not be LLD.
    let own_linker = ["linker", "fuse-ld", "link-self-contained"].iter().any(|flag| rustflags.contains(flag))
        || env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some();
    let wanted = var("PICOGENT_LINK_ORDER") != "0"
        && var("PROFILE") == "release"
        && var("TARGET") == "x86_64-unknown-linux-gnu"
        && !own_linker;
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join(ORDER_FILE);
    if wanted && order.is_file() {
        println!("cargo::rustc-link-arg-bin=picogent=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo::rustc-link-arg-bin=picogent=-Wl,--no-warn-symbol-ordering");
    }
}
