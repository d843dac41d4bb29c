//! Scheduler-heavy workloads for the probe benchmark, run as `cargo xtask workload <kind>`:
//! a pipe ping-pong between two processes and a loopback TCP request/response loop.
use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

/// Runs workload `kind` for `secs` and prints `ops <round trips per second>`.
pub fn run(kind: &str, secs: f64) -> anyhow::Result<()> {
    let ops = match kind {
        "pipe" => pipe(secs)?,
        "tcp" => tcp(secs)?,
        "pipe-echo" => return echo(std::io::stdin().lock(), std::io::stdout().lock()),
        other => anyhow::bail!("unknown workload `{other}` (pipe, tcp)"),
    };
    println!("ops {ops:.0}");
    Ok(())
}

fn echo(mut r: impl std::io::Read, mut w: impl std::io::Write) -> anyhow::Result<()> {
    let mut b = [0u8; 1];
    while r.read(&mut b)? == 1 {
        w.write_all(&b)?;
        w.flush()?;
    }
    Ok(())
}

/// One byte back and forth through pipes between this process and a child.
fn pipe(secs: f64) -> anyhow::Result<f64> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["workload", "pipe-echo"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let (mut to, mut from) = (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"));
    let ops = round_trips(secs, |b| {
        to.write_all(b)?;
        from.read_exact(b)
    })?;
    drop(to);
    child.wait()?;
    Ok(ops)
}

/// 64-byte requests echoed by a server thread over loopback TCP.
fn tcp(secs: f64) -> anyhow::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut b = [0u8; 64];
        loop {
            if s.read_exact(&mut b).is_err() {
                return Ok(());
            }
            s.write_all(&b)?;
        }
    });
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    let mut b = [0u8; 64];
    let ops = round_trips(secs, |_| {
        c.write_all(&b)?;
        c.read_exact(&mut b)
    })?;
    drop(c);
    let _ = server.join();
    Ok(ops)
}

fn round_trips(secs: f64, mut once: impl FnMut(&mut [u8; 1]) -> std::io::Result<()>) -> anyhow::Result<f64> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (start, mut n) = (Instant::now(), 0u64);
    let mut b = [7u8; 1];
    while Instant::now() < end {
        for _ in 0..100 {
            once(&mut b)?;
        }
        n += 100;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}
