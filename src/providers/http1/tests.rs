//! The client against scripted servers on `127.0.0.1:0`: connection reuse and its
//! limits, every way an answer can be framed or cut, a server that closed an idle
//! connection, and TLS against a certificate made for the test.

use super::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the scripted server does with the request it just read.
#[derive(Debug, Clone)]
enum Reply {
    /// Writes these bytes and waits for the next request on the connection.
    Keep(Vec<u8>),
    /// Writes these bytes and closes the connection.
    Close(Vec<u8>),
    /// Writes these bytes, and closes the connection a moment later.
    CloseLater(Vec<u8>),
    /// Closes the connection without writing anything.
    Hangup,
}

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A server answering the n-th request it reads (over all connections) with
/// `replies(n)`, plain or over TLS.
struct Server {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn start(replies: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Server {
        Server::start_with(None, replies).await
    }

    async fn start_with(
        tls: Option<tokio_rustls::TlsAcceptor>,
        replies: impl Fn(usize) -> Reply + Send + Sync + 'static,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(replies);
        let task = {
            let (accepted, requests) = (accepted.clone(), requests.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let (requests, replies, tls) = (requests.clone(), replies.clone(), tls.clone());
                    tokio::spawn(async move {
                        match tls {
                            None => serve(tcp, &requests, &*replies).await,
                            Some(acceptor) => {
                                if let Ok(stream) = acceptor.accept(tcp).await {
                                    serve(stream, &requests, &*replies).await;
                                }
                            }
                        }
                    });
                }
            })
        };
        Server {
            address,
            accepted,
            requests,
            task,
        }
    }

    fn url(&self, scheme: &str, host: &str) -> Url {
        Url::parse(&format!(
            "{scheme}://{host}:{}/v1/lookup",
            self.address.port()
        ))
        .unwrap()
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads requests (head up to the blank line, then `content-length` bytes) and replies.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    requests: &Mutex<Vec<String>>,
    replies: &(dyn Fn(usize) -> Reply + Send + Sync),
) {
    let mut buffer = Vec::new();
    loop {
        let request = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                if buffer.len() >= end + 4 + length {
                    let request = String::from_utf8_lossy(&buffer[..end + 4 + length]).into_owned();
                    buffer.drain(..end + 4 + length);
                    break request;
                }
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let index = {
            let mut all = requests.lock().unwrap();
            all.push(request);
            all.len() - 1
        };
        match replies(index) {
            Reply::Keep(bytes) => {
                if stream.write_all(&bytes).await.is_err() || stream.flush().await.is_err() {
                    return;
                }
            }
            Reply::Close(bytes) => {
                let _ = stream.write_all(&bytes).await;
                let _ = stream.flush().await;
                let _ = stream.shutdown().await;
                return;
            }
            Reply::CloseLater(bytes) => {
                let _ = stream.write_all(&bytes).await;
                let _ = stream.flush().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = stream.shutdown().await;
                return;
            }
            Reply::Hangup => return,
        }
    }
}

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        max_idle: 8,
        idle_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(2),
    }
}

fn client(url: &Url) -> Http1Client {
    Http1Client::new(
        url,
        &[("content-type", "application/json")],
        limits(),
        Vec::new(),
    )
    .unwrap()
}

/// What a call got: the answer's code and body.
type Called = Result<(u16, Vec<u8>), Failure>;

/// Posts `body` and reads the answer: its code and body.
async fn call(client: &Http1Client, body: &str) -> Called {
    let answer = client.post(body.to_owned()).await?;
    let code = answer.code();
    match answer.body(1024).await {
        Ok(bytes) => Ok((code, bytes)),
        Err(BodyError::TooLarge(_)) => Err(Failure::ResponseTooLarge),
        Err(BodyError::Failed(failure)) => Err(failure),
    }
}

#[tokio::test]
async fn the_request_is_one_post_with_the_fixed_head() {
    let server = Server::start(|_| Reply::Keep(ok("{}"))).await;
    let url = server.url("http", "127.0.0.1");
    let client = Http1Client::new(
        &url,
        &[
            ("accept", "application/json"),
            ("authorization", "Bearer t0k"),
        ],
        limits(),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(
        call(&client, r#"{"value":1}"#).await,
        Ok((200, b"{}".to_vec()))
    );
    let port = server.address.port();
    assert_eq!(
        server.requests(),
        [format!(
            "POST /v1/lookup HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\naccept: application/json\r\nauthorization: Bearer t0k\r\ncontent-length: 11\r\n\r\n{{\"value\":1}}"
        )]
    );
    assert!(
        !format!("{client:?}").contains("t0k"),
        "the fixed headers are never printed"
    );
}

#[tokio::test]
async fn headers_that_cannot_be_sent_are_refused_at_set_up() {
    let url = Url::parse("http://127.0.0.1:9/x").unwrap();
    let setup = |headers: &[(&str, &str)]| Http1Client::new(&url, headers, limits(), Vec::new());
    assert!(matches!(
        setup(&[("bad name", "v")]),
        Err(Http1SetupError::HeaderName(_))
    ));
    assert!(matches!(
        setup(&[("", "v")]),
        Err(Http1SetupError::HeaderName(_))
    ));
    let error = setup(&[("authorization", "Bearer a\r\nx-injected: 1")]).unwrap_err();
    assert!(matches!(error, Http1SetupError::HeaderValue(_)));
    assert!(
        !error.to_string().contains("injected"),
        "the value is not repeated: {error}"
    );
    assert!(setup(&[("authorization", "Bearer é")]).is_err());
    let ftp = Url::parse("ftp://127.0.0.1/x").unwrap();
    assert!(matches!(
        Http1Client::new(&ftp, &[], limits(), Vec::new()),
        Err(Http1SetupError::NotHttp(_))
    ));
}

#[tokio::test]
async fn a_thread_reuses_its_kept_alive_connection() {
    let server = Server::start(|n| Reply::Keep(ok(&format!("[{n}]")))).await;
    let client = client(&server.url("http", "127.0.0.1"));
    for n in 0..5 {
        assert_eq!(
            call(&client, "{}").await,
            Ok((200, format!("[{n}]").into_bytes()))
        );
    }
    assert_eq!(server.accepted(), 1);
    assert_eq!(client.idle_here(), 1);
}

#[tokio::test]
async fn a_chunked_answer_is_read_and_its_connection_reused() {
    let chunked =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n";
    let server = Server::start(move |_| Reply::Keep(chunked.to_vec())).await;
    let client = client(&server.url("http", "localhost"));
    for _ in 0..3 {
        assert_eq!(call(&client, "{}").await, Ok((200, b"[1,2]".to_vec())));
    }
    assert_eq!(
        server.accepted(),
        1,
        "localhost resolves, and the connection is kept"
    );
}

#[tokio::test]
async fn answers_whose_framing_was_not_exact_close_their_connection() {
    let cases: Vec<(&str, Reply, Called)> = vec![
        (
            "until the close",
            Reply::Close(b"HTTP/1.1 200 OK\r\n\r\n[1]".to_vec()),
            Ok((200, b"[1]".to_vec())),
        ),
        (
            "connection: close",
            Reply::Keep(
                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\n[2]".to_vec(),
            ),
            Ok((200, b"[2]".to_vec())),
        ),
        (
            "HTTP/1.0",
            Reply::Keep(b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\n[3]".to_vec()),
            Ok((200, b"[3]".to_vec())),
        ),
        (
            "bytes after the body",
            Reply::Keep(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n[4]HTTP/1.1 200".to_vec()),
            Ok((200, b"[4]".to_vec())),
        ),
        (
            "both lengths",
            Reply::Keep(
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n1\r\n5\r\n0\r\n\r\n"
                    .to_vec(),
            ),
            Ok((200, b"5".to_vec())),
        ),
        (
            "an interim answer first",
            Reply::Keep(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\n[6]"
                    .to_vec(),
            ),
            Ok((200, b"[6]".to_vec())),
        ),
        (
            "a body cut short",
            Reply::Close(b"HTTP/1.1 200 OK\r\ncontent-length: 30\r\n\r\n[7".to_vec()),
            Err(Failure::ConnectionReset),
        ),
        (
            "a chunked body cut short",
            Reply::Close(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n[8".to_vec()),
            Err(Failure::ConnectionReset),
        ),
        (
            "a broken chunked coding",
            Reply::Keep(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec()),
            Err(Failure::Malformed),
        ),
        (
            "a head cut short",
            Reply::Close(b"HTTP/1.1 200 OK\r\ncontent-le".to_vec()),
            Err(Failure::ConnectionReset),
        ),
        (
            "not HTTP",
            Reply::Keep(b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec()),
            Err(Failure::Malformed),
        ),
        (
            "a head over its bound",
            Reply::Keep(
                format!(
                    "HTTP/1.1 200 OK\r\nx-pad: {}\r\n\r\n",
                    "p".repeat(MAX_HEAD_BYTES)
                )
                .into_bytes(),
            ),
            Err(Failure::ResponseTooLarge),
        ),
        (
            "a body over the limit",
            Reply::Keep(
                format!("HTTP/1.1 200 OK\r\ncontent-length: 1025\r\n\r\n{}", "b".repeat(1025))
                    .into_bytes(),
            ),
            Err(Failure::ResponseTooLarge),
        ),
        (
            "a body over the limit until the close",
            Reply::Close(format!("HTTP/1.1 200 OK\r\n\r\n{}", "b".repeat(1025)).into_bytes()),
            Err(Failure::ResponseTooLarge),
        ),
    ];
    for (name, reply, expected) in cases {
        let server = Server::start(move |_| reply.clone()).await;
        let client = client(&server.url("http", "127.0.0.1"));
        assert_eq!(call(&client, "{}").await, expected, "{name}");
        assert_eq!(client.idle_here(), 0, "{name}: the connection is not kept");
    }
}

#[tokio::test]
async fn a_body_at_the_limit_is_read_whole() {
    let body = "b".repeat(1024);
    let answer = ok(&body);
    let server = Server::start(move |_| Reply::Keep(answer.clone())).await;
    let client = client(&server.url("http", "127.0.0.1"));
    assert_eq!(call(&client, "{}").await, Ok((200, body.into_bytes())));
    assert_eq!(client.idle_here(), 1);
}

#[tokio::test]
async fn an_idle_connection_the_server_closed_is_replaced_before_use() {
    // Every answer closes its connection a moment after writing it, though its framing
    // would allow reuse: the kept connection is found closed at the next call.
    let server = Server::start(|n| Reply::CloseLater(ok(&format!("[{n}]")))).await;
    let client = client(&server.url("http", "127.0.0.1"));
    assert_eq!(call(&client, "{}").await, Ok((200, b"[0]".to_vec())));
    assert_eq!(client.idle_here(), 1, "its framing allowed it");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(call(&client, "{}").await, Ok((200, b"[1]".to_vec())));
    assert_eq!(server.accepted(), 2);
    assert_eq!(
        server.requests().len(),
        2,
        "no request went to the closed connection"
    );
}

#[tokio::test]
async fn a_reused_connection_that_closes_unanswered_is_retried_once_on_a_new_one() {
    // The first request is answered and the connection kept; the second, on the kept
    // connection, is read and left unanswered (the server closing it just then), and
    // goes once more, on a new connection.
    let server = Server::start(|n| match n {
        1 => Reply::Hangup,
        _ => Reply::Keep(ok(&format!("[{n}]"))),
    })
    .await;
    let client = client(&server.url("http", "127.0.0.1"));
    assert_eq!(call(&client, "{}").await, Ok((200, b"[0]".to_vec())));
    assert_eq!(call(&client, "{}").await, Ok((200, b"[2]".to_vec())));
    assert_eq!((server.accepted(), server.requests().len()), (2, 3));
}

#[tokio::test]
async fn a_new_connection_that_closes_unanswered_is_never_retried() {
    let server = Server::start(|_| Reply::Hangup).await;
    let client = client(&server.url("http", "127.0.0.1"));
    assert_eq!(call(&client, "{}").await, Err(Failure::ConnectionReset));
    assert_eq!((server.accepted(), server.requests().len()), (1, 1));
}

#[tokio::test]
async fn a_reused_connection_cut_after_part_of_its_answer_is_not_retried() {
    let server = Server::start(|n| match n {
        0 => Reply::Keep(ok("[0]")),
        _ => Reply::Close(b"HTTP/1.1 200 OK\r\ncontent-".to_vec()),
    })
    .await;
    let client = client(&server.url("http", "127.0.0.1"));
    assert_eq!(call(&client, "{}").await, Ok((200, b"[0]".to_vec())));
    assert_eq!(call(&client, "{}").await, Err(Failure::ConnectionReset));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn idle_connections_are_bounded_per_thread_and_expire() {
    let server = Server::start(|_| Reply::Keep(ok("[]"))).await;
    let url = server.url("http", "127.0.0.1");
    let few = Http1Client::new(
        &url,
        &[],
        ConnectionLimits {
            max_idle: 2,
            ..limits()
        },
        Vec::new(),
    )
    .unwrap();
    // Four calls at once need four connections; two stay idle.
    let calls: Vec<_> = (0..4).map(|_| call(&few, "{}")).collect();
    for result in futures_util::future::join_all(calls).await {
        assert_eq!(result, Ok((200, b"[]".to_vec())));
    }
    assert_eq!((server.accepted(), few.idle_here()), (4, 2));

    let none = Http1Client::new(
        &url,
        &[],
        ConnectionLimits {
            max_idle: 0,
            ..limits()
        },
        Vec::new(),
    )
    .unwrap();
    call(&none, "{}").await.unwrap();
    assert_eq!(none.idle_here(), 0);

    let brief = Http1Client::new(
        &url,
        &[],
        ConnectionLimits {
            idle_timeout: Duration::from_millis(30),
            ..limits()
        },
        Vec::new(),
    )
    .unwrap();
    let before = server.accepted();
    call(&brief, "{}").await.unwrap();
    call(&brief, "{}").await.unwrap();
    assert_eq!(
        server.accepted(),
        before + 1,
        "reused within the idle timeout"
    );
    tokio::time::sleep(Duration::from_millis(60)).await;
    call(&brief, "{}").await.unwrap();
    assert_eq!(server.accepted(), before + 2, "a new one after it");
    assert_eq!(brief.idle_here(), 1, "the expired one was let go");
}

#[tokio::test]
async fn each_thread_keeps_its_own_connections() {
    let server = Server::start(|_| Reply::Keep(ok("[]"))).await;
    let client = client(&server.url("http", "127.0.0.1"));
    call(&client, "{}").await.unwrap();
    let other = client.clone();
    // On a thread of its own (with a runtime of its own); this runtime keeps serving.
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            assert_eq!(other.idle_here(), 0, "another thread sees none of them");
            call(&other, "{}").await.unwrap();
            call(&other, "{}").await.unwrap();
            assert_eq!(other.idle_here(), 1);
        });
    })
    .await
    .unwrap();
    assert_eq!(server.accepted(), 2, "one connection per thread");
    assert_eq!(client.idle_here(), 1);
}

#[tokio::test]
async fn nothing_listening_is_connect_failed() {
    let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = unused.local_addr().unwrap().port();
    drop(unused);
    let url = Url::parse(&format!("http://127.0.0.1:{port}/x")).unwrap();
    assert_eq!(
        call(&client(&url), "{}").await.map(|_| ()),
        Err(Failure::ConnectFailed)
    );
}

#[tokio::test]
async fn a_connect_that_takes_too_long_is_connect_failed() {
    // A TLS server that never finishes the handshake: TCP connects, TLS never does.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let url = Url::parse(&format!("https://localhost:{port}/x")).unwrap();
    let client = Http1Client::new(
        &url,
        &[],
        ConnectionLimits {
            connect_timeout: Duration::from_millis(100),
            ..limits()
        },
        Vec::new(),
    )
    .unwrap();
    let started = Instant::now();
    assert_eq!(
        call(&client, "{}").await.map(|_| ()),
        Err(Failure::ConnectFailed)
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A CA, and a certificate for `localhost` it signed, as a TLS acceptor and the CA's
/// certificate.
fn tls_server() -> (tokio_rustls::TlsAcceptor, CertificateDer<'static>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .unwrap();
    (
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ca.der().clone(),
    )
}

#[tokio::test]
async fn https_endpoints_are_verified_and_kept_alive() {
    let (acceptor, ca) = tls_server();
    let server = Server::start_with(Some(acceptor), |n| Reply::Keep(ok(&format!("[{n}]")))).await;
    let url = server.url("https", "localhost");
    let trusting = Http1Client::new(&url, &[], limits(), vec![ca]).unwrap();
    for n in 0..3 {
        assert_eq!(
            call(&trusting, "{}").await,
            Ok((200, format!("[{n}]").into_bytes()))
        );
    }
    assert_eq!(server.accepted(), 1, "one TLS connection for every call");

    // Without the test's CA the certificate is not trusted: nothing is sent.
    let before = server.requests().len();
    let platform = Http1Client::new(&url, &[], limits(), Vec::new()).unwrap();
    assert_eq!(
        call(&platform, "{}").await.map(|_| ()),
        Err(Failure::ConnectFailed)
    );
    assert_eq!(server.requests().len(), before);
}

#[tokio::test]
async fn a_tls_connection_the_server_closed_is_replaced_before_use() {
    let (acceptor, ca) = tls_server();
    let server = Server::start_with(Some(acceptor), |n| Reply::Close(ok(&format!("[{n}]")))).await;
    let client =
        Http1Client::new(&server.url("https", "localhost"), &[], limits(), vec![ca]).unwrap();
    assert_eq!(call(&client, "{}").await, Ok((200, b"[0]".to_vec())));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(call(&client, "{}").await, Ok((200, b"[1]".to_vec())));
    assert_eq!((server.accepted(), server.requests().len()), (2, 2));
}

/// A server on a thread of its own (so the counting allocator sees only the client):
/// it reads the request, then answers `103 Early Hints` for ever, until `for_at_most`
/// has passed or the client has gone.
fn interim_flood(for_at_most: Duration) -> (SocketAddr, std::thread::JoinHandle<usize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request).unwrap();
        let hint = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload; as=style\r\n\r\n";
        let burst: Vec<u8> = hint.repeat(64 * 1024 / hint.len());
        let started = std::time::Instant::now();
        let mut sent = 0;
        while started.elapsed() < for_at_most {
            match stream.write_all(&burst) {
                Ok(()) => sent += burst.len(),
                Err(_) => break,
            }
        }
        sent
    });
    (address, server)
}

#[test]
fn an_endless_run_of_interim_answers_ends_at_the_deadline_in_bounded_memory() {
    let (address, server) = interim_flood(Duration::from_secs(5));
    let url = Url::parse(&format!("http://{address}/v1/lookup")).unwrap();
    let client = client(&url);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deadline = Duration::from_millis(400);
    let started = Instant::now();
    let (called, peak) = crate::alloc_meter::peak_extra(|| {
        runtime.block_on(async { tokio::time::timeout(deadline, call(&client, "{}")).await })
    });
    let took = started.elapsed();
    drop(client);
    let sent = server.join().unwrap();
    assert!(called.is_err(), "no final answer ever came: {called:?}");
    assert!(
        took < deadline + Duration::from_millis(300),
        "the call ends at its deadline, not later: {took:?}"
    );
    assert!(
        sent > 2 * 1024 * 1024,
        "the flood was real: {sent} bytes sent"
    );
    assert!(
        peak < 1024 * 1024 && peak < sent / 2,
        "interim heads are not kept: {peak} bytes at the peak, {sent} sent"
    );
}
