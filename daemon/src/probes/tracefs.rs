//! tracefs: find (or mount) it, and parse tracepoint `format` files into field offsets.
//!
//! Rust eBPF has no CO-RE, so kernel programs read tracepoint fields at offsets that userspace
//! parses here at start-up and passes in as globals. Nothing about kernel layouts is hard-coded.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::ProbeError;

/// Where tracefs is normally mounted; the debugfs path is the legacy location.
const TRACEFS_PATHS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// One field of a tracepoint record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field name, without type or array suffix (`prev_comm`, not `char prev_comm[16]`).
    pub name: String,
    /// Byte offset in the record the program receives.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// Whether the C type is signed.
    pub signed: bool,
}

/// A parsed tracepoint `format` file.
#[derive(Debug, Clone)]
pub struct Format {
    /// `category:name`, for error messages.
    pub event: String,
    /// All fields, common ones included.
    pub fields: Vec<Field>,
    /// The `print fmt:` line.
    pub print_fmt: String,
}

impl Format {
    /// Parses the text of a format file. `event` names it in errors.
    pub fn parse(event: &str, text: &str) -> Result<Self, ProbeError> {
        let mut fields = Vec::new();
        let mut print_fmt = String::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("print fmt:") {
                print_fmt = rest.trim().to_string();
            } else if line.starts_with("field:") {
                fields.push(parse_field(line).ok_or_else(|| ProbeError::Format {
                    event: event.to_string(),
                    reason: format!("unparseable field line `{line}`"),
                })?);
            }
        }
        if fields.is_empty() {
            return Err(ProbeError::Format {
                event: event.to_string(),
                reason: "no `field:` lines".to_string(),
            });
        }
        Ok(Self {
            event: event.to_string(),
            fields,
            print_fmt,
        })
    }

    /// Reads and parses `<tracefs>/events/<category>/<name>/format`.
    pub fn read(tracefs: &Path, category: &str, name: &str) -> Result<Self, ProbeError> {
        let path = tracefs
            .join("events")
            .join(category)
            .join(name)
            .join("format");
        let event = format!("{category}:{name}");
        let text = fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ProbeError::MissingTracepoint {
                event: event.clone(),
            },
            std::io::ErrorKind::PermissionDenied => ProbeError::Permission {
                what: format!("reading {}", path.display()),
            },
            _ => ProbeError::Io {
                path: path.clone(),
                source: e,
            },
        })?;
        Self::parse(&event, &text)
    }

    /// The field called `name`, or an error naming the event and the field.
    pub fn field(&self, name: &str) -> Result<&Field, ProbeError> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| ProbeError::MissingField {
                event: self.event.clone(),
                field: name.to_string(),
            })
    }

    /// Offset of field `name`, checking that it has the size the kernel program reads.
    pub fn offset(&self, name: &str, size: u32) -> Result<u32, ProbeError> {
        let f = self.field(name)?;
        if f.size != size {
            return Err(ProbeError::Format {
                event: self.event.clone(),
                reason: format!("field `{name}` is {} bytes, expected {size}", f.size),
            });
        }
        Ok(f.offset)
    }

    /// OR of every flag value in the print format's `__print_flags(..)` tables. For
    /// `sched_switch` that is the set of `prev_state` bits that mean "not runnable".
    #[must_use]
    pub fn print_flags_mask(&self) -> u64 {
        let mut mask = 0;
        let mut rest = self.print_fmt.as_str();
        while let Some(i) = rest.find("{ 0x") {
            rest = &rest[i + 4..];
            let end = rest
                .find(|c: char| !c.is_ascii_hexdigit())
                .unwrap_or(rest.len());
            if let Ok(v) = u64::from_str_radix(&rest[..end], 16) {
                mask |= v;
            }
        }
        mask
    }
}

impl Format {
    /// The value of symbol `name` in the print format's `__print_symbolic(..)` tables
    /// (e.g. `TCP_ESTABLISHED` -> 1 in `sock:inet_sock_set_state`).
    pub fn print_symbol(&self, name: &str) -> Result<u64, ProbeError> {
        let needle = format!("\"{name}\" }}");
        let end = self
            .print_fmt
            .find(&needle)
            .ok_or_else(|| ProbeError::Format {
                event: self.event.clone(),
                reason: format!("no symbol `{name}` in its print format"),
            })?;
        let head = &self.print_fmt[..end];
        let start = head.rfind('{').map_or(0, |i| i + 1);
        let value = head[start..].trim().trim_end_matches(',').trim();
        let parsed = match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => value.parse().ok(),
        };
        parsed.ok_or_else(|| ProbeError::Format {
            event: self.event.clone(),
            reason: format!("symbol `{name}` has no numeric value (`{value}`)"),
        })
    }
}

/// Parses `field:unsigned int foo[4];	offset:8;	size:16;	signed:0;`.
fn parse_field(line: &str) -> Option<Field> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, None);
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once(':')?;
        match key {
            "field" => decl = Some(value.trim()),
            "offset" => offset = value.trim().parse().ok(),
            "size" => size = value.trim().parse().ok(),
            "signed" => signed = Some(value.trim() == "1"),
            _ => {}
        }
    }
    let decl = decl?;
    let last = decl.split_whitespace().last()?;
    let name = last.split('[').next()?.trim_start_matches('*').to_string();
    Some(Field {
        name,
        offset: offset?,
        size: size?,
        signed: signed.unwrap_or(false),
    })
}

/// Returns the tracefs mount point, mounting it at `/sys/kernel/tracing` when it is missing
/// and we may (root). Otherwise says exactly what to mount.
pub fn ensure_mounted() -> Result<PathBuf, ProbeError> {
    for p in TRACEFS_PATHS {
        if Path::new(p).join("events").is_dir() {
            return Ok(PathBuf::from(p));
        }
    }
    let target = TRACEFS_PATHS[0];
    if super::privileges::is_root()
        && mount_fs("tracefs", target, "tracefs")
        && Path::new(target).join("events").is_dir()
    {
        return Ok(PathBuf::from(target));
    }
    Err(ProbeError::NoTracefs)
}

/// Mounts the pseudo filesystem `fstype` at `target`; true on success.
pub(crate) fn mount_fs(source: &str, target: &str, fstype: &str) -> bool {
    use std::ffi::CString;
    let (Ok(src), Ok(tgt), Ok(ty)) = (
        CString::new(source),
        CString::new(target),
        CString::new(fstype),
    ) else {
        return false;
    };
    // SAFETY: valid NUL-terminated strings; no data argument.
    unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = include_str!("../../tests/fixtures/sched_switch.format");
    const WAKEUP: &str = include_str!("../../tests/fixtures/sched_wakeup.format");
    const STATE: &str = include_str!("../../tests/fixtures/inet_sock_set_state.format");

    #[test]
    fn parses_real_sched_switch_format() {
        let f = Format::parse("sched:sched_switch", SWITCH).unwrap();
        assert_eq!(f.offset("prev_pid", 4).unwrap(), 24);
        assert_eq!(f.offset("prev_state", 8).unwrap(), 32);
        assert_eq!(f.offset("next_pid", 4).unwrap(), 56);
        let comm = f.field("prev_comm").unwrap();
        assert_eq!((comm.offset, comm.size, comm.signed), (8, 16, false));
        assert_eq!(f.print_flags_mask(), 0xff);
    }

    #[test]
    fn parses_real_sched_wakeup_format() {
        let f = Format::parse("sched:sched_wakeup", WAKEUP).unwrap();
        assert_eq!(f.offset("pid", 4).unwrap(), 24);
        assert!(f.field("target_cpu").unwrap().signed);
    }

    #[test]
    fn missing_field_names_event_and_field() {
        let text = SWITCH.replace("next_pid", "next_tid");
        let f = Format::parse("sched:sched_switch", &text).unwrap();
        let err = f.offset("next_pid", 4).unwrap_err().to_string();
        assert!(err.contains("sched:sched_switch"), "{err}");
        assert!(err.contains("next_pid"), "{err}");
    }

    #[test]
    fn wrong_size_is_refused() {
        let text = SWITCH.replace("offset:32;\tsize:8;", "offset:32;\tsize:4;");
        let f = Format::parse("sched:sched_switch", &text).unwrap();
        assert!(
            f.offset("prev_state", 8)
                .unwrap_err()
                .to_string()
                .contains("4 bytes")
        );
    }

    #[test]
    fn symbols_come_from_print_symbolic() {
        let f = Format::parse("sock:inet_sock_set_state", STATE).unwrap();
        assert_eq!(f.print_symbol("TCP_ESTABLISHED").unwrap(), 1);
        assert_eq!(f.print_symbol("TCP_CLOSE").unwrap(), 7);
        assert_eq!(f.print_symbol("IPPROTO_TCP").unwrap(), 6);
        assert!(
            f.print_symbol("TCP_NOPE")
                .unwrap_err()
                .to_string()
                .contains("TCP_NOPE")
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Format::parse("x:y", "").is_err());
        assert!(Format::parse("x:y", "field:int a;\toffset:zz;").is_err());
    }
}
