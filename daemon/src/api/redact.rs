//! What the daemon's read endpoints leave out by default: the arguments of watched processes.
//! Inference servers are often started with API keys or tokens on their command line, and
//! `/api/v1/timeline` is read by whoever can scrape; `--show-cmdlines` puts them back.

use crate::collect::procfs::ProcessInfo;

/// `info` with its command line cut to the program, unless `show` is set.
#[must_use]
pub fn process(mut info: ProcessInfo, show: bool) -> ProcessInfo {
    if !show {
        info.cmdline = cmdline(&info.cmdline);
    }
    info
}

/// The program of a command line, with a count of the arguments left out.
#[must_use]
pub fn cmdline(full: &str) -> String {
    let mut words = full.split(' ').filter(|w| !w.is_empty());
    let Some(program) = words.next() else {
        return String::new();
    };
    match words.count() {
        0 => program.to_owned(),
        n => format!("{program} [{n} arguments redacted; the daemon's --show-cmdlines shows them]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_left_out_unless_asked_for() {
        let full = "python -m vllm.entrypoints.openai.api_server --api-key sk-secret123";
        let cut = cmdline(full);
        assert!(cut.starts_with("python ["), "{cut}");
        assert!(cut.contains("4 arguments redacted"), "{cut}");
        assert!(!cut.contains("sk-secret"), "{cut}");
        assert_eq!(cmdline("/usr/bin/server"), "/usr/bin/server");
        assert_eq!(cmdline(""), "");
        let info = ProcessInfo {
            cmdline: full.into(),
            ..ProcessInfo::default()
        };
        assert!(!process(info.clone(), false).cmdline.contains("sk-secret"));
        assert_eq!(process(info, true).cmdline, full);
    }
}
