//! Socket probes against real loopback traffic: connect latency for the client's 4-tuple, RTT
//! samples for an active connection, and the server-side first-byte time of a server that
//! sleeps 100 ms before it answers.
use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    process::{Command, Stdio},
    time::Duration,
};

use inferscope::probes::{Family, HookStatus, Probes, sockets::endpoints};
use inferscope_tests::root_or_skip;
use probe_common::sockets::{EV_ACCEPT, EV_CLOSE, EV_CONNECT, EV_REQUEST, SockEvent};

/// A server in its own process: reads a request, sleeps 100 ms, answers 100 bytes.
const SLOW_SERVER: &str = r"
import socket, sys, time
s = socket.socket()
s.bind(('127.0.0.1', 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    while True:
        d = c.recv(4096)
        if not d:
            break
        time.sleep(0.1)
        c.sendall(b'x' * 100)
    c.close()
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_rtt_and_server_first_byte() {
    let Some(_machine) = root_or_skip("connect_rtt_and_server_first_byte") else {
        return;
    };
    let mut server = Command::new("python3")
        .args(["-c", SLOW_SERVER])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().unwrap();

    let mut probes = Probes::load().unwrap();
    probes.set_watch(&[server.id()]).unwrap();
    probes.attach(Family::Sockets).unwrap();
    assert!(
        probes.hooks().iter().all(HookStatus::is_attached),
        "{:?}",
        probes.hooks()
    );
    let mut reader = probes.sock_events(4096).unwrap().unwrap();

    let local = tokio::task::spawn_blocking(move || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let local = c.local_addr().unwrap();
        let mut buf = [0u8; 100];
        for _ in 0..3 {
            c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
            c.read_exact(&mut buf).unwrap();
        }
        local
    })
    .await
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let mut events: Vec<SockEvent> = Vec::new();
    while let Ok(Some(ev)) =
        tokio::time::timeout(Duration::from_millis(500), reader.rx.recv()).await
    {
        events.push(ev);
    }
    server.kill().unwrap();
    let _ = server.wait();

    let connect = events
        .iter()
        .find(|e| e.kind == EV_CONNECT && endpoints(&e.conn.tuple).is_some_and(|(l, _)| l == local))
        .expect("a connect event for the client's 4-tuple");
    assert_eq!(endpoints(&connect.conn.tuple).unwrap().1.port(), port);
    assert_eq!(connect.tgid, std::process::id());
    assert!(connect.duration_ns > 0 && connect.duration_ns < 1_000_000_000);

    let server_side = |e: &&SockEvent| {
        endpoints(&e.conn.tuple).is_some_and(|(l, r)| l.port() == port && r == local)
    };
    assert!(
        events
            .iter()
            .filter(|e| e.kind == EV_ACCEPT)
            .any(|e| server_side(&e)),
        "accept event"
    );
    let requests: Vec<&SockEvent> = events
        .iter()
        .filter(|e| e.kind == EV_REQUEST)
        .filter(server_side)
        .collect();
    assert_eq!(
        requests.len(),
        3,
        "three exchanges on the server's connection"
    );
    for r in &requests {
        let ex = r.conn.exchange;
        let ttfb_ms = (ex.first_out_ns - ex.req_in_ns) as f64 / 1e6;
        assert!(
            (90.0..=110.0).contains(&ttfb_ms),
            "server first byte after {ttfb_ms:.1} ms, expected 100 +-10%"
        );
        assert_eq!((ex.bytes_in, ex.bytes_out), (18, 100));
        assert_eq!(r.tgid, server.id());
    }

    assert_close_totals(&events, local, server_side);
    let d = probes.sock_drops().unwrap();
    assert_eq!(d.ringbuf_full + d.conns_full + reader.drops.get(), 0);
}

/// The close events of both ends: the client's (not watched) carries the `tcp_sock` totals
/// read at close, the server's (watched) an RTT reading per read and write.
fn assert_close_totals(
    events: &[SockEvent],
    local: std::net::SocketAddr,
    server_side: impl Fn(&&SockEvent) -> bool,
) {
    let close = events
        .iter()
        .find(|e| e.kind == EV_CLOSE && endpoints(&e.conn.tuple).is_some_and(|(l, _)| l == local))
        .expect("a close event for the client's connection");
    // The client is not watched: its connection gets the tcplife treatment, totals read
    // from the `tcp_sock` at close, with one RTT reading.
    assert!(close.conn.rtt_samples > 0, "an RTT reading at close");
    assert!(close.conn.srtt_last_us > 0);
    // Data bytes; `bytes_received` counts the peer's FIN as one when it arrived first.
    assert_eq!(close.conn.bytes_out, 54);
    assert!(
        (300..=301).contains(&close.conn.bytes_in),
        "bytes in: {}",
        close.conn.bytes_in
    );
    // The server is watched: its side samples the RTT at every read and write.
    let server_close = events
        .iter()
        .find(|e| e.kind == EV_CLOSE && server_side(e))
        .expect("a close event for the server's connection");
    assert!(
        server_close.conn.rtt_samples >= 6,
        "RTT samples on the watched server's active connection: {}",
        server_close.conn.rtt_samples
    );
    assert!(
        close.duration_ns >= 300_000_000,
        "lifetime covers the three 100 ms exchanges"
    );
}

/// A server in a network namespace that answers each connection with 64 KiB and closes it.
const CLOSING_SERVER: &str = r"
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 8000))
s.listen(64)
print('ready', flush=True)
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b'x' * 65536)
    c.close()
";

/// Retransmits, RTT samples and lifetimes of connections that open and close between two
/// windows (a server that closes after every answer, as llama-server does) reach the window:
/// the close carries what the connection table no longer holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_connections_under_loss_count_their_retransmits() {
    use inferscope::collect::{
        kernel::{KernelCollector, KernelOptions},
        timeline::{Part, Window},
    };
    use inferscope_tests::{NetNs, faults::RandomLoss};

    let Some(_machine) = root_or_skip("short_connections_under_loss_count_their_retransmits")
    else {
        return;
    };
    let ns = NetNs::create("shortloss");
    let ns_addr = std::net::Ipv4Addr::from(NetNs::NS_ADDR);
    let mut server = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c", CLOSING_SERVER])
        .arg(ns_addr.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut kernel = KernelCollector::start(KernelOptions {
        servers: vec![server.id()],
        loadgen: Some(std::process::id()),
        ..KernelOptions::default()
    })
    .unwrap();
    let mut window = Window::default();
    let pids = [server.id()];
    // A first window: the connection table's reading before the load.
    kernel
        .close_windows(&mut [Part {
            pids: &pids,
            window: &mut window,
        }])
        .unwrap();

    let loss = RandomLoss::on_device(&ns.name, &ns.ns_dev, 15);
    // Under 15% loss one exchange can stall in the kernel's backoff: it is skipped, not fatal,
    // and most of them must finish.
    let answered = tokio::task::spawn_blocking(move || {
        let exchange = || -> std::io::Result<()> {
            let addr = (ns_addr, 8000).into();
            let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(20))?;
            c.set_read_timeout(Some(Duration::from_secs(20)))?;
            c.write_all(b"GET / HTTP/1.1\r\n\r\n")?;
            let mut answer = vec![0u8; 65536];
            c.read_exact(&mut answer)
        };
        (0..40).filter(|_| exchange().is_ok()).count()
    })
    .await
    .unwrap();
    assert!(answered >= 20, "only {answered} of 40 exchanges finished");
    // The last FINs and their acknowledgements.
    std::thread::sleep(Duration::from_secs(2));
    drop(loss);

    let mut window = Window::default();
    kernel
        .close_windows(&mut [Part {
            pids: &pids,
            window: &mut window,
        }])
        .unwrap();
    server.kill().unwrap();
    let _ = server.wait();
    drop(ns);
    let net = window.net.expect("the window's network signals");
    assert!(
        net.retrans > 0,
        "15% loss on 40 connections of 64 KiB and no retransmit counted: {net:?}"
    );
    assert!(
        net.srtt_mean_us.is_some(),
        "no RTT sample of a closed connection: {net:?}"
    );
    assert!(
        !kernel.retransmits().is_empty(),
        "the retransmit events of the same connections"
    );
    // The server closed each after one answer: their lifetimes are those of one exchange.
    assert!(
        net.closes >= 30,
        "40 connections, {} closes seen: {net:?}",
        net.closes
    );
    assert!(
        net.lifetime_p50_ms
            .is_some_and(|ms| ms > 0.0 && ms < 10_000.0),
        "{net:?}"
    );
}
