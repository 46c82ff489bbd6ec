//! The microVM host, made in a thread of its own at start. Its probe asks QEMU what it
//! is (about 20 ms here), and sandboxd's READY, which every start of the product waits
//! for, need not wait for that too: the first call that needs the host waits instead.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use tonic::Status;

use super::vms::VmHost;

#[derive(Clone)]
pub struct LateVmHost(watch::Receiver<Option<Arc<VmHost>>>);

impl LateVmHost {
    /// Probes the host for microVMs (the guest image in `image`, VMs' directories in
    /// `dir`) in the background.
    pub fn start(image: PathBuf, dir: PathBuf) -> LateVmHost {
        let (tx, rx) = watch::channel(None);
        let tx = Arc::new(tx);
        let (in_thread, thread_tx) = ((image.clone(), dir.clone()), tx.clone());
        let spawned = std::thread::Builder::new()
            .name("microvm-probe".into())
            .spawn(move || probe(in_thread.0, in_thread.1, &thread_tx));
        // A thread the kernel refuses leaves the probe to no one: made here, then.
        if spawned.is_err() {
            probe(image, dir, &tx);
        }
        LateVmHost(rx)
    }

    /// The host, once probed.
    pub async fn get(&self) -> Result<Arc<VmHost>, Status> {
        let mut rx = self.0.clone();
        let host =
            rx.wait_for(Option::is_some).await.map_err(|_| Status::internal("the microVM probe did not finish"))?;
        host.clone().ok_or_else(|| Status::internal("the microVM probe did not finish"))
    }
}

fn probe(image: PathBuf, dir: PathBuf, tx: &watch::Sender<Option<Arc<VmHost>>>) {
    let facts = cc_host::microvm::gather(&image, true);
    let host = VmHost::new(&facts, image, dir);
    tracing::info!(microvm = %host.probe.line, "sandboxd microvm probe");
    let _ = tx.send(Some(Arc::new(host)));
}
