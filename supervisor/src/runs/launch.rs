//! How every process of a run is launched: through sandboxd, which builds the run's
//! envelope for it. A sandboxd that died as the call was made is waited for and asked
//! once more; one that restarted since the run started has the run registered with it
//! again first. The runner, an agent, a terminal and a bash call all come this way.

use cc_proto::sandboxd::v1 as sb;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::{LiveRun, RunError, RunManager};

pub(super) fn is_reason(status: &Status, reason: &str) -> bool {
    cc_proto::reasons::reason_of(status).is_some_and(|(r, _)| r == reason)
}

/// sandboxd's answer that it has no such run, or that the run ended as it launched.
fn sandboxd_lost_or_ended(status: &Status) -> bool {
    is_reason(status, cc_proto::reasons::RUN_NOT_FOUND) || is_reason(status, cc_proto::reasons::RUN_ENDED)
}

impl RunManager {
    /// Why sandboxd no longer has a run the call found live, as the run's own state
    /// says it: over (its row has ended, or is ending), or lost by a sandboxd that
    /// restarted since the run started.
    fn gone_from_sandboxd(&self, run: &LiveRun, status: &Status) -> RunError {
        let ended = |state, reason| RunError::Ended { run_id: run.run_id.clone(), state, reason };
        match self.env.store.run(run.run_id.as_str()) {
            Ok(Some(row)) if !row.state.is_live() => {
                ended(row.state, row.end_reason.unwrap_or_else(|| "no reason recorded".into()))
            }
            _ if is_reason(status, cc_proto::reasons::RUN_ENDED) => ended(run.state(), "it is ending".into()),
            _ => RunError::Unregistered(run.run_id.clone()),
        }
    }

    /// Launches `request` through sandboxd (see [`RunManager::on_sandboxd`]). `tool`
    /// names the caller in a violation's event.
    pub(super) async fn launch(
        &self,
        run: &LiveRun,
        request: sb::LaunchRequest,
        tool: &str,
    ) -> Result<tonic::Streaming<sb::LaunchResponse>, RunError> {
        let channels = self.channels().clone();
        let launching = |mut sandboxd: crate::channels::SandboxdClientWithSecret| {
            let (channels, request) = (channels.clone(), request.clone());
            async move {
                let launched = sandboxd.launch(request);
                channels.within(crate::helpers::HelperKind::Sandboxd, "Launch", launched).await.map(|l| l.into_inner())
            }
        };
        self.on_sandboxd(run, tool, launching).await
    }

    /// An interactive launch (an ACP agent, a terminal), with its input (the launch
    /// itself first), through [`RunManager::on_sandboxd`].
    pub(crate) async fn launch_interactive(
        &self,
        run: &LiveRun,
        launch: sb::LaunchRequest,
        tool: &str,
    ) -> Result<(tonic::Streaming<sb::LaunchInteractiveResponse>, mpsc::Sender<sb::LaunchInteractiveRequest>), RunError>
    {
        use sb::launch_interactive_request::Input;
        let channels = self.channels().clone();
        let launching = |mut sandboxd: crate::channels::SandboxdClientWithSecret| {
            let (channels, launch) = (channels.clone(), launch.clone());
            async move {
                let (inputs, input_rx) = mpsc::channel::<sb::LaunchInteractiveRequest>(16);
                let _ = inputs.send(sb::LaunchInteractiveRequest { input: Some(Input::Launch(launch)) }).await;
                let call = sandboxd.launch_interactive(ReceiverStream::new(input_rx));
                let launched = channels.within(crate::helpers::HelperKind::Sandboxd, "LaunchInteractive", call).await?;
                Ok((launched.into_inner(), inputs))
            }
        };
        self.on_sandboxd(run, tool, launching).await
    }

    /// Makes a launch `call` of the run's: once more on the sandboxd that replaces one
    /// that died as the call was made, and after registering the run again with a
    /// sandboxd that restarted since the run started.
    pub(super) async fn on_sandboxd<T, F, Fut>(&self, run: &LiveRun, tool: &str, call: F) -> Result<T, RunError>
    where
        F: Fn(crate::channels::SandboxdClientWithSecret) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let (sandboxd, sandboxd_pid) = self.channels().sandboxd_except(None).await?;
        let mut attempt = call(sandboxd).await;
        // sandboxd died as the call was made (the transport failed; sandboxd said
        // nothing): the call waits for the process that replaces it and is made once
        // more. Its command, if it had started, died with the old envelope.
        if let Err(status) = &attempt
            && is_reason(status, cc_proto::reasons::HELPER_RESTARTING)
        {
            let (sandboxd, _) = self.channels().sandboxd_except(Some(sandboxd_pid)).await?;
            attempt = call(sandboxd).await;
        }
        // A sandboxd that restarted since the run started, before the run was registered
        // with it again: register it now and launch once more.
        if let Err(status) = &attempt
            && is_reason(status, cc_proto::reasons::RUN_NOT_FOUND)
            && self.live_run(&run.run_id).is_some()
        {
            self.reregister(run).await?;
            attempt = call(self.channels().sandboxd().await?).await;
        }
        match attempt {
            Ok(launched) => Ok(launched),
            // sandboxd knows no such run, or it ended as the launch was made: the run
            // ended meanwhile, or sandboxd lost it (it restarted).
            Err(status) if sandboxd_lost_or_ended(&status) => Err(self.gone_from_sandboxd(run, &status)),
            Err(status) => {
                // A link planted where sandboxd would have had to follow it: the agent's
                // doing, and a violation the run's events must show.
                if let Some((reason, metadata)) = cc_proto::reasons::reason_of(&status)
                    && reason == cc_proto::reasons::LINK_IN_ROOT
                {
                    let attempted = metadata.get("path").cloned().unwrap_or_default();
                    let blocked_by = "sandboxd: a link inside the run's roots, never followed";
                    let payload = json!({ "attempted": attempted, "blocked_by": blocked_by, "tool": tool });
                    self.events().record("sandbox_violation", &format!("run:{}", run.record.id), payload);
                }
                Err(RunError::Helper(status))
            }
        }
    }
}
