//! picogent's own process, sealed against the processes it starts (a coding agent, a hook, an
//! MCP server): none of them reads a secret out of it.
//!
//! - It is not dumpable: its `/proc/<pid>/environ`, `mem`, `maps` and the rest belong to root
//!   and are refused to a process of the same user, and to root's own children that hold no
//!   capability (a coding agent started without the sandbox holds none).
//! - The environment block the kernel handed it at start, which `/proc/<pid>/environ` shows, is
//!   overwritten with zeros once every variable is copied into memory of its own: the variables
//!   stay readable by picogent (`std::env::var`), and no tracker token, model key or MCP token is
//!   left where a reader of `environ` would find it.
//!
//! [`seal`] runs first thing in `main`, before any thread starts.

use std::ffi::{OsString, c_char};

unsafe extern "C" {
    static mut environ: *mut *mut c_char;
}

/// Makes this process not dumpable, and moves its environment out of the block the kernel
/// shows. Must be called before any other thread starts (it sets the environment).
pub fn seal() {
    // SAFETY: prctl with PR_SET_DUMPABLE only changes this process's flag.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    wipe_initial_environment();
}

/// Copies every variable into memory of this process's own, then zeroes the strings of the
/// environment it started with.
fn wipe_initial_environment() {
    let vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut originals: Vec<*mut c_char> = Vec::new();
    // SAFETY: `environ` is the C library's, read before anything changes it; no other thread
    // runs yet (the caller's promise), so nothing reads or writes the environment meanwhile.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            originals.push(*entry);
            entry = entry.add(1);
        }
        libc::clearenv();
        for (name, value) in vars {
            std::env::set_var(name, value);
        }
        for string in originals {
            let length = libc::strlen(string);
            std::ptr::write_bytes(string, 0, length);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_environment_stays_readable_and_the_initial_block_is_zeroed() {
        // A child process of the test binary: sealing changes the whole process.
        if std::env::var_os("PICOGENT_SEAL_CHILD").is_some() {
            super::seal();
            assert_eq!(std::env::var("PICOGENT_SEAL_SECRET").as_deref(), Ok("s3cret-value"));
            let environ = std::fs::read("/proc/self/environ").unwrap();
            assert!(!environ.is_empty() && environ.iter().all(|byte| *byte == 0), "the block is still there, zeroed");
            let shown = String::from_utf8_lossy(&environ);
            assert!(!shown.contains("s3cret-value"), "{shown}");
            // SAFETY: prctl only reads the flag.
            assert_eq!(unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) }, 0);
            return;
        }
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "seal::tests::the_environment_stays_readable_and_the_initial_block_is_zeroed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PICOGENT_SEAL_CHILD", "1")
            .env("PICOGENT_SEAL_SECRET", "s3cret-value")
            .status()
            .unwrap();
        assert!(status.success());
    }
}
