//! Helpers never outlive their supervisor (issue 2). In a test binary of its own, because
//! becoming the reaper of orphans concerns the whole test process.

use std::time::Duration;

use cc_tests::{Options, Supervisor, alive, wait_with_limit};
use nix::sys::signal::Signal;

#[test]
fn helpers_die_with_a_killed_supervisor() {
    cc_tests::become_subreaper();
    let mut sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let pids = sup.helper_pids();
    sup.signal(Signal::SIGKILL);
    wait_with_limit(&mut sup.child, Duration::from_secs(5));
    // Orphaned helpers are now our children: wait for each (PR_SET_PDEATHSIG ends them),
    // with a deadline so that a survivor fails the test instead of hanging it.
    for (name, pid) in pids {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None));
        });
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(_) => assert!(!alive(pid), "{name} (pid {pid}) is still there"),
            Err(_) => panic!("{name} (pid {pid}) survived its supervisor"),
        }
    }
}
