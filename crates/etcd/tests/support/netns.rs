//! A network namespace joined to this one by a veth pair, so that what
//! runs inside (an etcd member and its clients) can be cut off from
//! everything outside by taking the link down. Needs root, as the tests
//! run under `scripts/test`.

use std::process::Command;

/// The namespace; dropping it deletes it and its link.
pub(crate) struct Netns {
    name: String,
    host_link: String,
    /// This side's address on the link.
    pub(crate) host_ip: String,
    /// The inside's address on the link.
    pub(crate) inside_ip: String,
}

fn ip(args: &[&str]) {
    let status = Command::new("ip")
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e} (the partition test needs iproute2)"));
    assert!(status.success(), "ip {args:?}: {status}");
}

impl Netns {
    /// A new namespace on a /30 of 10.201.0.0/16 chosen at random.
    pub(crate) fn create() -> Self {
        let tag = rand::random::<u16>() >> 2;
        let name = format!("distlock-{tag}");
        let (host_link, inside_link) = (format!("dlh{tag}"), format!("dln{tag}"));
        let base = u32::from(tag) * 4;
        let (third, fourth) = (base >> 8, base & 0xff);
        let host_ip = format!("10.201.{third}.{}", fourth + 1);
        let inside_ip = format!("10.201.{third}.{}", fourth + 2);
        ip(&["netns", "add", &name]);
        let netns = Self {
            name,
            host_link,
            host_ip,
            inside_ip,
        };
        ip(&[
            "link",
            "add",
            &netns.host_link,
            "type",
            "veth",
            "peer",
            "name",
            &inside_link,
        ]);
        ip(&["link", "set", &inside_link, "netns", &netns.name]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", netns.host_ip),
            "dev",
            &netns.host_link,
        ]);
        ip(&["link", "set", &netns.host_link, "up"]);
        netns.inside(&[
            "addr",
            "add",
            &format!("{}/30", netns.inside_ip),
            "dev",
            &inside_link,
        ]);
        netns.inside(&["link", "set", &inside_link, "up"]);
        netns.inside(&["link", "set", "lo", "up"]);
        netns
    }

    fn inside(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name, "ip"];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// `program` to run inside the namespace.
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// Cuts the inside off from everything outside.
    pub(crate) fn partition(&self) {
        ip(&["link", "set", &self.host_link, "down"]);
    }

    /// Joins it again.
    pub(crate) fn heal(&self) {
        ip(&["link", "set", &self.host_link, "up"]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the link, and with it
        // ours.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .status();
    }
}
