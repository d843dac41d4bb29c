//! BTF reader tests: a hand-built blob that uses every kind, and the running kernel's BTF.

use super::*;

/// Builds a BTF blob type by type, like the kernel's encoder does.
struct Builder {
    types: Vec<u8>,
    strings: Vec<u8>,
    big: bool,
}

impl Builder {
    fn new(big: bool) -> Self {
        Self {
            types: Vec::new(),
            strings: vec![0],
            big,
        }
    }

    fn put(&mut self, v: u32) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.types.extend_from_slice(&b);
    }

    fn str(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        off
    }

    /// A type record: name, kind, `kind_flag`, vlen, size/type; the caller appends extra data.
    fn ty(&mut self, name: &str, kind: u32, kflag: bool, vlen: u32, size_or_ref: u32) {
        let n = self.str(name);
        self.put(n);
        self.put((u32::from(kflag) << 31) | (kind << 24) | vlen);
        self.put(size_or_ref);
    }

    fn member(&mut self, name: &str, type_id: u32, offset: u32) {
        let n = self.str(name);
        self.put(n);
        self.put(type_id);
        self.put(offset);
    }

    fn finish(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let w = |out: &mut Vec<u8>, v: u32| {
            out.extend_from_slice(&if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            });
        };
        out.extend_from_slice(&if self.big {
            MAGIC.to_be_bytes()
        } else {
            MAGIC.to_le_bytes()
        });
        out.extend_from_slice(&[1, 0]);
        // A 32-byte header, longer than the classic 24, as a newer kernel may write.
        w(&mut out, 32);
        w(&mut out, 0);
        w(&mut out, self.types.len() as u32);
        w(&mut out, self.types.len() as u32);
        w(&mut out, self.strings.len() as u32);
        w(&mut out, 0);
        w(&mut out, 0);
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strings);
        out
    }
}

/// Every kind, with extra data, before the struct that the lookups target:
/// ```c
/// typedef int pid_t;
/// struct task_struct {
///     unsigned int __state;          // 0
///     unsigned int flags : 3;        // bit 32, bitfield
///     union { long a; struct { char b; volatile pid_t inner; }; }; // 64
///     pid_t pid;                     // 128
///     const pid_t tgid;              // 160
///     struct task_struct *parent;    // 192
/// };
/// ```
fn sample(big: bool) -> Vec<u8> {
    let mut b = Builder::new(big);
    b.ty("int", KIND_INT, false, 0, 4); // 1
    b.put(0x0100_0020);
    b.ty("pid_t", KIND_TYPEDEF, false, 0, 1); // 2
    b.ty("", KIND_PTR, false, 0, 9); // 3
    b.ty("", KIND_ARRAY, false, 0, 0); // 4
    b.put(1);
    b.put(1);
    b.put(16);
    b.ty("state", KIND_ENUM, false, 2, 4); // 5
    for (name, val) in [("A", 0), ("B", 1)] {
        let n = b.str(name);
        b.put(n);
        b.put(val);
    }
    b.ty("fwd", KIND_FWD, false, 0, 0); // 6
    b.ty("", KIND_VOLATILE, false, 0, 2); // 7
    b.ty("", KIND_CONST, false, 0, 2); // 8
    b.ty("task_struct", KIND_STRUCT, true, 6, 32); // 9
    b.member("__state", 1, 0);
    b.member("flags", 1, (3 << 24) | 32);
    b.member("", 10, 64);
    b.member("pid", 2, 128);
    b.member("tgid", 8, 160);
    b.member("parent", 3, 192);
    b.ty("", KIND_UNION, false, 2, 8); // 10
    b.member("a", 1, 0);
    b.member("", 11, 0);
    b.ty("", KIND_STRUCT, false, 2, 8); // 11
    b.member("b", 1, 0);
    b.member("inner", 7, 32);
    b.ty("", KIND_RESTRICT, false, 0, 3); // 12
    b.ty("f", KIND_FUNC, false, 0, 14); // 13
    b.ty("", KIND_FUNC_PROTO, false, 2, 1); // 14
    for _ in 0..2 {
        b.put(0);
        b.put(1);
    }
    b.ty("v", KIND_VAR, false, 0, 1); // 15
    b.put(1);
    b.ty(".data", KIND_DATASEC, false, 1, 4); // 16
    b.put(15);
    b.put(0);
    b.put(4);
    b.ty("double", KIND_FLOAT, false, 0, 8); // 17
    b.ty("tag", KIND_DECL_TAG, false, 0, 9); // 18
    b.put(u32::MAX);
    b.ty("user", KIND_TYPE_TAG, false, 0, 1); // 19
    b.ty("big", KIND_ENUM64, false, 1, 8); // 20
    b.put(0);
    b.put(1);
    b.put(2);
    // A decoy: a later struct of the same name without members (e.g. a stub) is ignored.
    b.ty("task_struct", KIND_STRUCT, false, 0, 0); // 21
    b.finish()
}

#[test]
fn walks_every_kind_and_finds_members() {
    for big in [false, true] {
        let btf = Btf::parse(&sample(big)).unwrap();
        assert_eq!(btf.len(), 21, "big={big}");
        assert_eq!(btf.member_offset("task_struct", "pid").unwrap(), (16, 4));
        assert_eq!(btf.member_offset("task_struct", "tgid").unwrap(), (20, 4));
        assert_eq!(btf.member_offset("task_struct", "__state").unwrap(), (0, 4));
        assert_eq!(btf.member_offset("task_struct", "parent").unwrap(), (24, 8));
        // Inside the anonymous union's anonymous struct: 64 + 32 bits.
        assert_eq!(btf.member_offset("task_struct", "inner").unwrap(), (12, 4));
    }
}

#[test]
fn bitfields_and_missing_names_are_errors() {
    let btf = Btf::parse(&sample(false)).unwrap();
    assert!(matches!(
        btf.member_offset("task_struct", "flags"),
        Err(BtfError::Bitfield { .. })
    ));
    assert!(matches!(
        btf.member_offset("task_struct", "nope"),
        Err(BtfError::NoMember { .. })
    ));
    assert!(matches!(
        btf.member_offset("mm_struct", "pid"),
        Err(BtfError::NoStruct(_))
    ));
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    let good = sample(false);
    assert!(Btf::parse(&[]).is_err());
    assert!(Btf::parse(&good[..20]).is_err());
    // Every truncation of the type section must fail cleanly.
    for cut in 33..good.len() - 60 {
        let mut bad = good.clone();
        bad.truncate(cut);
        let _ = Btf::parse(&bad);
    }
    let mut bad = good.clone();
    bad[0] = 0;
    assert!(matches!(Btf::parse(&bad), Err(BtfError::Malformed(_))));
    // An unknown kind (31) in the first record.
    let mut bad = good;
    bad[32 + 7] = 31;
    assert!(
        Btf::parse(&bad)
            .unwrap_err()
            .to_string()
            .contains("unknown kind")
    );
}

/// The running kernel's BTF: the walk must cover the whole section and find the fields the
/// raw-tracepoint programs read.
#[test]
fn reads_this_kernels_task_struct() {
    let Ok(btf) = Btf::from_file(VMLINUX) else {
        println!("skipped: {VMLINUX} not readable");
        return;
    };
    assert!(btf.len() > 10_000, "only {} types", btf.len());
    let (pid, psize) = btf.member_offset("task_struct", "pid").unwrap();
    let (tgid, tsize) = btf.member_offset("task_struct", "tgid").unwrap();
    println!("task_struct: pid at {pid}, tgid at {tgid}");
    assert_eq!((psize, tsize), (4, 4));
    assert!(pid > 0 && tgid > 0 && pid != tgid, "pid {pid} tgid {tgid}");
    let (_, state_size) = btf.member_offset("task_struct", "__state").unwrap();
    assert_eq!(state_size, 4);
}
