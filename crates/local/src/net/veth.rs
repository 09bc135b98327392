//! The sandbox's link to the host: a veth pair and a `/30` of its own.
//!
//! The kernel routes and NATs the sandbox's packets (see `host_rules`), so
//! no helper process runs per sandbox. Each sandbox gets slot `n` of
//! [`POOL`]: the host's side of the pair (`gv<hash>`) holds `.1` of the
//! slot's `/30`, the sandbox's `eth0` holds `.2` and routes everything
//! through `.1`.
//!
//! Slots are chosen from the addresses the host's links hold right now,
//! under a lock shared by every Garrison on the host, so two Garrisons
//! (with different state directories) never pick the same one, and a slot
//! is free again the moment its namespace, and with it the pair, is gone.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use anyhow::anyhow;

use super::pool::{HOST_IF_PREFIX, POOL};
use super::sysctl::write_sysctl;
use super::tools::{self, Tools};
use sandbox::{Result, SandboxError, free_slot_for, hashed_id};

const SLOT_PREFIX: u8 = 30;
const SLOTS: u32 = 1 << (SLOT_PREFIX - POOL.1);
/// Taken while a slot is chosen and its addresses are put in place.
const LOCK_FILE: &str = "/run/garrison-net.lock";
/// The sandbox's side of the pair, inside its namespace.
pub(super) const SANDBOX_IF: &str = "eth0";

/// One sandbox's link, as stored with its network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot(u32);

impl Slot {
    /// The host's end: the sandbox's gateway and default route.
    pub(super) fn host_addr(self) -> Ipv4Addr {
        self.addr(1)
    }

    /// The sandbox's own address.
    pub(super) fn sandbox_addr(self) -> Ipv4Addr {
        self.addr(2)
    }

    fn addr(self, host: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(POOL.0) + (self.0 << (32 - SLOT_PREFIX)) + host)
    }

    /// The slot whose `/30` holds `addr`, if `addr` is in the pool.
    fn of(addr: Ipv4Addr) -> Option<Self> {
        in_pool(addr).then(|| Self((u32::from(addr) - u32::from(POOL.0)) >> (32 - SLOT_PREFIX)))
    }
}

/// Whether `addr` is in [`POOL`].
pub(super) fn in_pool(addr: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - POOL.1);
    u32::from(addr) & mask == u32::from(POOL.0)
}

/// The host-side link name of the namespace `netns_name`: short enough for
/// the kernel's 15 characters, and the same after a Garrison restart.
pub(super) fn host_ifname(netns_name: &str) -> String {
    format!("{HOST_IF_PREFIX}{}", &hashed_id(netns_name)[..10])
}

/// Slots taken by the host's `(link, address)` pairs, or an error naming a
/// link that is not ours but uses the pool.
fn used_slots(links: &[(String, IpAddr)]) -> std::result::Result<BTreeSet<u32>, String> {
    let mut used = BTreeSet::new();
    for (name, ip) in links {
        let IpAddr::V4(ip) = *ip else { continue };
        let Some(slot) = Slot::of(ip) else { continue };
        if !name.starts_with(HOST_IF_PREFIX) {
            return Err(format!(
                "the host's link {name} has the address {ip}, inside {}/{}, the network \
                 the local backend gives its sandboxes",
                POOL.0, POOL.1
            ));
        }
        used.insert(slot.0);
    }
    Ok(used)
}

/// Makes the pair for the namespace at `netns` (named `netns_name`),
/// addresses both ends and routes the sandbox through the host. Returns the
/// host-side link name, the slot, and the host's `(link, address)` pairs
/// as they were before the pair was made.
pub(crate) async fn attach(
    tools: &Tools,
    netns: &Path,
    netns_name: &str,
) -> Result<(String, Slot, Vec<(String, IpAddr)>)> {
    let _lock = lock().await?;
    super::host_rules::ensure(tools).await?;
    let host_if = host_ifname(netns_name);
    let json = tools::run(&tools.ip, ["-j", "address", "show"], None, None).await?;
    let links = super::links::link_addresses(&json);
    let used = used_slots(&links).map_err(|e| SandboxError::Fatal(anyhow!(e)))?;
    let slot = free_slot_for(netns_name, &used, SLOTS)
        .map(Slot)
        .ok_or_else(|| {
            SandboxError::Transient(anyhow!(
                "all {SLOTS} sandbox networks in {}/{} are in use",
                POOL.0,
                POOL.1
            ))
        })?;
    let host_cidr = format!("{}/{SLOT_PREFIX}", slot.host_addr());
    let sandbox_cidr = format!("{}/{SLOT_PREFIX}", slot.sandbox_addr());
    let batch_host = format!(
        "link add {host_if} type veth peer name {SANDBOX_IF} netns {netns_name}\n\
         address add {host_cidr} dev {host_if}\nlink set {host_if} up\n"
    );
    tools::run(&tools.ip, ["-batch", "-"], None, Some(&batch_host)).await?;
    // The gateway port is DNATed to the host's loopback (`host_rules`),
    // which the kernel only routes for links that allow it.
    write_sysctl(&format!("net/ipv4/conf/{host_if}/route_localnet"), "1")?;
    // IPv6 is off on the link: the sandbox keeps only its own ::1, and
    // nothing it sends over IPv6 (link-local, multicast to the host's
    // services) is taken in by the host's end.
    write_sysctl(&format!("net/ipv6/conf/{host_if}/disable_ipv6"), "1")?;
    let batch_sandbox = format!(
        "link set lo up\naddress add {sandbox_cidr} dev {SANDBOX_IF}\nlink set {SANDBOX_IF} up\n\
         route add default via {}\n",
        slot.host_addr()
    );
    tools::run(
        &tools.ip,
        ["-batch", "-"],
        Some(netns),
        Some(&batch_sandbox),
    )
    .await?;
    Ok((host_if, slot, links))
}

/// Deletes the host's end of a pair, and with it the sandbox's; a link
/// already gone is fine.
pub(crate) async fn detach(tools: &Tools, host_if: &str) -> Result<()> {
    // Not /sys/class/net: it shows the links of the namespace sysfs was
    // mounted in, which need not be this thread's.
    match tools::run(&tools.ip, ["link", "delete", host_if], None, None).await {
        Err(e) if !e.to_string().contains("Cannot find device") => Err(e),
        _ => Ok(()),
    }
}

async fn lock() -> Result<nix::fcntl::Flock<File>> {
    tokio::task::spawn_blocking(|| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_FILE)
            .map_err(|e| SandboxError::Fatal(anyhow!("opening {LOCK_FILE}: {e}")))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| SandboxError::Transient(anyhow!("locking {LOCK_FILE}: {e}")))
    })
    .await
    .map_err(|e| SandboxError::Transient(anyhow!("waiting for {LOCK_FILE}: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_carve_the_pool_into_thirties() {
        assert_eq!(SLOTS, 16384);
        let s = Slot(0);
        assert_eq!(s.host_addr(), Ipv4Addr::new(10, 213, 0, 1));
        assert_eq!(s.sandbox_addr(), Ipv4Addr::new(10, 213, 0, 2));
        let last = Slot(SLOTS - 1);
        assert_eq!(last.sandbox_addr(), Ipv4Addr::new(10, 213, 255, 254));
        assert_eq!(Slot::of(Ipv4Addr::new(10, 213, 1, 6)), Some(Slot(65)));
        assert_eq!(Slot::of(Ipv4Addr::new(10, 214, 0, 1)), None);
    }

    #[test]
    fn choose_skips_used_slots_and_wraps() {
        use sandbox::first_free;
        let used = BTreeSet::from([5, 6, SLOTS - 1]);
        assert_eq!(first_free(&used, 5, SLOTS), Some(7));
        assert_eq!(first_free(&used, SLOTS - 1, SLOTS), Some(0));
        assert_eq!(first_free(&BTreeSet::new(), 9, SLOTS), Some(9));
        let full: BTreeSet<u32> = (0..SLOTS).collect();
        assert_eq!(first_free(&full, 0, SLOTS), None);
    }

    #[test]
    fn used_slots_come_from_our_links_and_others_in_the_pool_are_refused() {
        let ours = r#"[{"ifname":"lo","addr_info":[{"local":"127.0.0.1"}]},
            {"ifname":"gv0123456789","addr_info":[{"local":"10.213.0.5"}]},
            {"ifname":"eth0","addr_info":[{"local":"192.0.2.2"}]}]"#;
        let ours = super::super::links::link_addresses(ours);
        assert_eq!(used_slots(&ours), Ok(BTreeSet::from([1])));
        let clash = r#"[{"ifname":"wg0","addr_info":[{"local":"10.213.7.1"}]}]"#;
        let err = used_slots(&super::super::links::link_addresses(clash)).unwrap_err();
        assert!(
            err.contains("wg0") && err.contains("10.213.0.0/16"),
            "{err}"
        );
    }

    #[test]
    fn host_link_names_fit_the_kernel_limit() {
        let name = host_ifname("garrison-0123456789abcdef-deadbeef");
        assert!(
            name.len() <= 15 && name.starts_with(HOST_IF_PREFIX),
            "{name}"
        );
        assert_eq!(name, host_ifname("garrison-0123456789abcdef-deadbeef"));
    }
}
