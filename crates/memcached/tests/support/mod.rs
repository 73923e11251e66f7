//! Shared helpers for the memcached backend's tests: server addresses from
//! the environment, memcached processes of the tests' own, and a bare
//! text-protocol client to look at keys behind the backend's back.

// Each test binary uses a part of this module, re-exports included.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_core::backend::{AcquireRequest, Backend, Lease};
use distlock_core::testing::{free_loopback_port, required_env, try_grant, until_serving};
use distlock_core::{Claim, Holder, LockName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub use distlock_core::testing::{eventually, unique_name as unique};

/// The URL of the shared server, or a panic that says how to get one.
pub fn url() -> String {
    env("DISTLOCK_TEST_MEMCACHED_URL")
}

/// The URL of the shared three servers in quorum mode.
pub fn quorum_url() -> String {
    env("DISTLOCK_TEST_MEMCACHED_QUORUM_URL")
}

fn env(var: &str) -> String {
    required_env(
        var,
        "run the tests with scripts/test, which starts memcached",
    )
}

/// One attempt through the backend alone, without a keeper: a lease that
/// nobody extends.
pub async fn grant(backend: &dyn Backend, name: &LockName, lease: Duration) -> Option<Lease> {
    grant_as(backend, name, Claim::Exclusive, lease)
        .await
        .expect("try_acquire")
}

/// As [`grant`], for `claim`, with the backend's error.
pub async fn grant_as(
    backend: &dyn Backend,
    name: &LockName,
    claim: Claim,
    lease: Duration,
) -> distlock_core::Result<Option<Lease>> {
    let request = AcquireRequest::new(
        name.clone(),
        claim,
        lease,
        Holder::this_process(Some("memcached-tests")).into(),
    );
    try_grant(backend, &request).await
}

/// A memcached process of the test's own, killed when dropped.
pub struct OwnServer {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
}

impl OwnServer {
    /// Starts `$MEMCACHED_BIN` on a free loopback port with `args` added.
    pub async fn start(args: &[&str]) -> Self {
        let mut server = Self {
            child: None,
            port: free_loopback_port(),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        };
        server.spawn().await;
        server
    }

    async fn spawn(&mut self) {
        let bin = env("MEMCACHED_BIN");
        // `-u root` matters only when running as root, where memcached
        // insists on being told which user to be.
        let child = Command::new(&bin)
            .args(["-u", "root", "-l", "127.0.0.1", "-U", "0"])
            .args(["-p", &self.port.to_string()])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let what = format!("memcached on port {}", self.port);
        let addr = self.addr();
        let child = self.child.insert(child);
        until_serving(child, &what, || async {
            TcpStream::connect(&addr).await.is_ok()
        })
        .await;
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILLs the server and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server (SIGSTOP): it keeps its connections and answers
    /// nothing until [`resume`](Self::resume)d.
    pub fn pause(&self) {
        self.signal("-STOP");
        // kill(1) returns once the signal is sent, not once every thread of
        // the server has stopped: until then it may still answer a request.
        let pid = self.child.as_ref().expect("running").id();
        let started = Instant::now();
        while !all_threads_stopped(pid) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "memcached {pid} did not stop"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Kills the server and starts a new one, empty, on the same port.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A bare text-protocol connection, for looking at keys directly.
pub struct Peek {
    stream: BufReader<TcpStream>,
}

/// An item as `mg <key> v c t f` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub value: Vec<u8>,
    pub cas: u64,
    /// Seconds left; -1 for never.
    pub ttl: i64,
    /// The client flags: a semaphore's limit on its record and slots.
    pub flags: u32,
}

impl Peek {
    pub async fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Self {
            stream: BufReader::new(stream),
        }
    }

    async fn line(&mut self) -> String {
        let mut line = String::new();
        self.stream.read_line(&mut line).await.expect("read a line");
        assert!(line.ends_with("\r\n"), "connection closed: {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    pub async fn get(&mut self, key: &str) -> Option<Item> {
        self.send(format!("mg {key} v c t f\r\n").as_bytes()).await;
        let line = self.line().await;
        if line == "EN" {
            return None;
        }
        let mut words = line.split(' ');
        assert_eq!(words.next(), Some("VA"), "{line}");
        let len: usize = words.next().unwrap().parse().unwrap();
        let mut item = Item {
            value: vec![0; len + 2],
            cas: 0,
            ttl: 0,
            flags: 0,
        };
        for word in words {
            if let Some(cas) = word.strip_prefix('c') {
                item.cas = cas.parse().unwrap();
            } else if let Some(ttl) = word.strip_prefix('t') {
                item.ttl = ttl.parse().unwrap();
            } else if let Some(flags) = word.strip_prefix('f') {
                item.flags = flags.parse().unwrap();
            }
        }
        self.stream.read_exact(&mut item.value).await.unwrap();
        item.value.truncate(len);
        Some(item)
    }

    pub async fn set(&mut self, key: &str, value: &[u8], ttl: u32) {
        let mut command = format!("ms {key} {} T{ttl}\r\n", value.len()).into_bytes();
        command.extend_from_slice(value);
        command.extend_from_slice(b"\r\n");
        self.send(&command).await;
        let line = self.line().await;
        assert_eq!(line, "HD", "storing {key}");
    }

    /// Sets `key`'s expiry to `ttl` seconds from now, whatever it holds;
    /// returns whether it was there.
    pub async fn touch(&mut self, key: &str, ttl: u32) -> bool {
        self.send(format!("mg {key} T{ttl}\r\n").as_bytes()).await;
        let line = self.line().await;
        match line.as_str() {
            "HD" => true,
            "EN" => false,
            _ => panic!("touching {key}: {line}"),
        }
    }

    /// Deletes `key`; returns whether it was there.
    pub async fn delete(&mut self, key: &str) -> bool {
        self.send(format!("md {key}\r\n").as_bytes()).await;
        let line = self.line().await;
        match line.as_str() {
            "HD" => true,
            "NF" => false,
            _ => panic!("deleting {key}: {line}"),
        }
    }

    /// Stores `count` items of `size` bytes under `prefix`, pipelined.
    /// Returns how many the server refused.
    pub async fn fill(&mut self, prefix: &str, first: usize, count: usize, size: usize) -> usize {
        let value = vec![b'f'; size];
        let mut batch = Vec::with_capacity(count * (size + 48));
        for i in first..first + count {
            batch.extend_from_slice(format!("ms {prefix}{i:08} {size} T0 q\r\n").as_bytes());
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
        }
        batch.extend_from_slice(b"mn\r\n");
        self.send(&batch).await;
        let mut refused = 0;
        loop {
            let line = self.line().await;
            if line == "MN" {
                return refused;
            }
            refused += 1;
        }
    }

    pub async fn stats(&mut self) -> HashMap<String, String> {
        self.send(b"stats\r\n").await;
        let mut stats = HashMap::new();
        loop {
            let line = self.line().await;
            if line == "END" {
                return stats;
            }
            let mut words = line.splitn(3, ' ');
            assert_eq!(words.next(), Some("STAT"), "{line}");
            let name = words.next().unwrap().to_owned();
            stats.insert(name, words.next().unwrap_or("").to_owned());
        }
    }

    pub async fn stat(&mut self, name: &str) -> u64 {
        self.stats()
            .await
            .get(name)
            .unwrap_or_else(|| panic!("no stat {name}"))
            .parse()
            .unwrap()
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).await.expect("write");
    }
}

/// Whether every thread of process `pid` is stopped (state `T`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command name's closing parenthesis.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    })
}
