//! The address of a container that takes its address from DHCP: read from PVE
//! ([`PveBackend::dhcp_address`]).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::PveBackend;

impl PveBackend {
    /// Reads the DHCP address of `net0` from `GET …/interfaces`, polling with backoff for at most
    /// `timeout`.
    pub(super) async fn dhcp_address(
        &self,
        node: &str,
        vmid: u32,
        timeout: Duration,
    ) -> anyhow::Result<Option<IpAddr>> {
        let ct = self.client.ct(node, vmid);
        let iface = self.opts.defaults.interface.clone();
        let start = Instant::now();
        let mut delay = Duration::from_millis(200);
        loop {
            let found = ct
                .interfaces()
                .await?
                .into_iter()
                .filter(|i| i.name == iface)
                .find_map(|i| i.inet?.split('/').next()?.parse::<IpAddr>().ok());
            if found.is_some() {
                return Ok(found);
            }
            if start.elapsed() >= timeout {
                bail!("CT {vmid} got no DHCP address on {iface} within {:.1} s", timeout.as_secs_f64());
            }
            tokio::time::sleep(delay.min(timeout.saturating_sub(start.elapsed()))).await;
            delay = (delay * 2).min(Duration::from_secs(3));
        }
    }
}
