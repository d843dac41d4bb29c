//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`): enough to find the byte
//! offset of a struct member, so raw-tracepoint programs can read `task_struct` fields without
//! CO-RE and without a hard-coded layout.
//!
//! Format (`Documentation/bpf/btf.rst`): a header, a type section of variable-length records
//! (a 12-byte `btf_type` followed by kind-specific data) and a string section. Type ids count
//! records from 1. Only what member lookup needs is decoded; every kind is still walked so the
//! record boundaries stay right.

use std::path::Path;

/// Where the running kernel exposes its own BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;

// Kinds, from include/uapi/linux/btf.h.
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Why BTF could not be read or a member not found.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The bytes are not BTF this reader understands.
    #[error("malformed BTF: {0}")]
    Malformed(String),
    /// No struct of that name.
    #[error("BTF has no struct `{0}`")]
    NoStruct(String),
    /// The struct has no such member (also searched inside anonymous members).
    #[error("struct `{strukt}` has no member `{member}`")]
    NoMember {
        /// The struct.
        strukt: String,
        /// The member.
        member: String,
    },
    /// The member is a bitfield or not byte-aligned: a byte read cannot reach it.
    #[error("member `{strukt}.{member}` is a bitfield, not byte-addressable")]
    Bitfield {
        /// The struct.
        strukt: String,
        /// The member.
        member: String,
    },
}

/// One struct/union member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    name_off: u32,
    type_id: u32,
    /// Offset from the start of the enclosing type, in bits.
    bit_offset: u32,
    /// Bitfield width; 0 = not a bitfield.
    bitfield_size: u32,
}

/// One decoded type record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Type {
    name_off: u32,
    kind: u32,
    /// `size` for INT/STRUCT/UNION/ENUM/FLOAT/DATASEC, else the referenced type id.
    size_or_ref: u32,
    /// STRUCT/UNION only.
    members: Vec<Member>,
}

/// Parsed BTF: all types (index = type id, 0 = void) and the string section.
#[derive(Debug)]
pub struct Btf {
    types: Vec<Type>,
    strings: Vec<u8>,
}

/// Reads little- or big-endian u16/u32 from a slice, as the header's magic says.
#[derive(Clone, Copy)]
struct Reader<'a> {
    bytes: &'a [u8],
    big: bool,
}

impl Reader<'_> {
    fn u32(self, at: usize) -> Result<u32, BtfError> {
        let b: [u8; 4] = at
            .checked_add(4)
            .and_then(|end| self.bytes.get(at..end))
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| BtfError::Malformed(format!("truncated at byte {at}")))?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
}

impl Btf {
    /// Reads and parses a BTF file, normally [`VMLINUX`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, BtfError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| BtfError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&bytes)
    }

    /// Parses raw BTF bytes (header, types, strings).
    pub fn parse(bytes: &[u8]) -> Result<Self, BtfError> {
        let magic = bytes
            .get(..2)
            .ok_or_else(|| BtfError::Malformed("shorter than its magic".into()))?;
        let big = match (
            u16::from_le_bytes([magic[0], magic[1]]),
            u16::from_be_bytes([magic[0], magic[1]]),
        ) {
            (MAGIC, _) => false,
            (_, MAGIC) => true,
            _ => return Err(BtfError::Malformed(format!("bad magic {magic:02x?}"))),
        };
        let r = Reader { bytes, big };
        // btf_header: magic u16, version u8, flags u8, hdr_len, type_off, type_len, str_off,
        // str_len. Newer kernels may append fields; hdr_len says where the sections start.
        let version = bytes.get(2).copied().unwrap_or(0);
        if version != 1 {
            return Err(BtfError::Malformed(format!(
                "version {version}, expected 1"
            )));
        }
        let hdr_len = r.u32(4)? as usize;
        if hdr_len < 24 {
            return Err(BtfError::Malformed(format!("header length {hdr_len}")));
        }
        let section = |off: usize, len: usize, what: &str| {
            let start = hdr_len.checked_add(off);
            start
                .and_then(|s| s.checked_add(len).map(|e| (s, e)))
                .and_then(|(s, e)| bytes.get(s..e))
                .ok_or_else(|| BtfError::Malformed(format!("{what} section out of bounds")))
        };
        let type_sec = section(r.u32(8)? as usize, r.u32(12)? as usize, "type")?;
        let str_sec = section(r.u32(16)? as usize, r.u32(20)? as usize, "string")?;
        let types = parse_types(Reader {
            bytes: type_sec,
            big,
        })?;
        Ok(Self {
            types,
            strings: str_sec.to_vec(),
        })
    }

    /// Number of types, void excluded.
    #[must_use]
    pub fn len(&self) -> usize {
        self.types.len() - 1
    }

    /// Whether there are no types besides void.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn name(&self, off: u32) -> &str {
        let Some(tail) = self.strings.get(off as usize..) else {
            return "";
        };
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        std::str::from_utf8(&tail[..end]).unwrap_or("")
    }

    fn get(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize).filter(|_| id != 0)
    }

    /// Follows typedef/const/volatile/restrict/type-tag to the underlying type.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        // A bound on the chain protects against malformed cycles.
        for _ in 0..32 {
            let t = self.get(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_ref;
                }
                _ => return Some(t),
            }
        }
        None
    }

    /// Byte offset and byte size of member `member` of `struct strukt`, looking through
    /// anonymous struct/union members. Fails on bitfields and unaligned members.
    pub fn member_offset(&self, strukt: &str, member: &str) -> Result<(u32, u32), BtfError> {
        // Forward declarations are kind FWD, so the first STRUCT with members is the definition.
        let st = self
            .types
            .iter()
            .find(|t| {
                t.kind == KIND_STRUCT && !t.members.is_empty() && self.name(t.name_off) == strukt
            })
            .ok_or_else(|| BtfError::NoStruct(strukt.into()))?;
        let (m, bits) = self
            .find_member(st, member, 0, 0)
            .ok_or_else(|| BtfError::NoMember {
                strukt: strukt.into(),
                member: member.into(),
            })?;
        if m.bitfield_size != 0 || bits % 8 != 0 {
            return Err(BtfError::Bitfield {
                strukt: strukt.into(),
                member: member.into(),
            });
        }
        let size = match self.resolve(m.type_id) {
            Some(t)
                if matches!(
                    t.kind,
                    KIND_INT | KIND_ENUM | KIND_ENUM64 | KIND_STRUCT | KIND_UNION | KIND_FLOAT
                ) =>
            {
                t.size_or_ref
            }
            Some(t) if t.kind == KIND_PTR => 8,
            _ => 0,
        };
        Ok((bits / 8, size))
    }

    /// The byte offset of `strukt.member`, which the programs read as `size` bytes: an error
    /// when this kernel's member has another size.
    pub fn sized_member(&self, strukt: &str, member: &str, size: u32) -> Result<u32, BtfError> {
        let (offset, actual) = self.member_offset(strukt, member)?;
        if actual != size {
            return Err(BtfError::Malformed(format!(
                "{strukt}.{member} is {actual} bytes, expected {size}"
            )));
        }
        Ok(offset)
    }

    fn find_member(&self, t: &Type, name: &str, base: u32, depth: u32) -> Option<(Member, u32)> {
        if depth > 8 {
            return None;
        }
        for m in &t.members {
            let at = base.checked_add(m.bit_offset)?;
            if m.name_off != 0 {
                if self.name(m.name_off) == name {
                    return Some((*m, at));
                }
            } else if let Some(inner) = self.resolve(m.type_id)
                && matches!(inner.kind, KIND_STRUCT | KIND_UNION)
                && let Some(found) = self.find_member(inner, name, at, depth + 1)
            {
                return Some(found);
            }
        }
        None
    }
}

/// Walks the type section; each kind is followed by its own amount of extra data.
fn parse_types(r: Reader<'_>) -> Result<Vec<Type>, BtfError> {
    let mut types = vec![Type {
        name_off: 0,
        kind: 0,
        size_or_ref: 0,
        members: Vec::new(),
    }];
    let mut at = 0;
    while at < r.bytes.len() {
        let name_off = r.u32(at)?;
        let info = r.u32(at + 4)?;
        let size_or_ref = r.u32(at + 8)?;
        at += 12;
        let vlen = (info & 0xffff) as usize;
        let kind = (info >> 24) & 0x1f;
        let kind_flag = info >> 31 == 1;
        let mut members = Vec::new();
        let extra = match kind {
            KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
            | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
            // INT: one u32 of encoding/offset/bits. VAR: linkage. DECL_TAG: component index.
            KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
            // btf_array: type, index_type, nelems.
            KIND_ARRAY => 12,
            KIND_STRUCT | KIND_UNION => {
                for i in 0..vlen {
                    let p = at + 12 * i;
                    let offset = r.u32(p + 8)?;
                    // With kind_flag the offset packs the bitfield size in its top byte.
                    let (bit_offset, bitfield_size) = if kind_flag {
                        (offset & 0x00ff_ffff, offset >> 24)
                    } else {
                        (offset, 0)
                    };
                    members.push(Member {
                        name_off: r.u32(p)?,
                        type_id: r.u32(p + 4)?,
                        bit_offset,
                        bitfield_size,
                    });
                }
                12 * vlen
            }
            // btf_enum: name, val. btf_param: name, type.
            KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
            // btf_var_secinfo: type, offset, size. btf_enum64: name, lo32, hi32.
            KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
            k => {
                return Err(BtfError::Malformed(format!(
                    "unknown kind {k} at type {}",
                    types.len()
                )));
            }
        };
        at += extra;
        if at > r.bytes.len() {
            return Err(BtfError::Malformed(format!(
                "type {} runs past the type section",
                types.len()
            )));
        }
        types.push(Type {
            name_off,
            kind,
            size_or_ref,
            members,
        });
    }
    Ok(types)
}

#[cfg(test)]
mod tests;
