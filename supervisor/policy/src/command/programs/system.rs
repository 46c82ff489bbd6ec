//! Programs that act on the machine: signals, services, the network configuration.

use super::super::Part;
use super::super::classify::{argv, skip_options};
use super::super::walk::Analyzer;
use super::super::words::Arg;
use crate::effect::CommandClass as C;

pub fn kill(args: &[Arg], part: &mut Part) {
    if args.iter().any(|a| a.text == "-l" || a.text == "-L" || a.text == "--list" || a.text == "--table") {
        part.add(C::ReadOnly, "");
        return;
    }
    let after_signal = skip_options(args, "sn", &["signal"]);
    let targets = if args
        .first()
        .is_some_and(|a| a.text.starts_with('-') && a.text[1..].chars().all(|c| c.is_ascii_alphanumeric()))
    {
        // `kill -9 -1`: the first word is the signal, so `-1` after it is a pid.
        args.iter().skip(1).collect::<Vec<_>>()
    } else {
        after_signal.iter().collect()
    };
    // `-01` and `-0x1` are -1 to kill too.
    let every_process = |t: &str| {
        let n = t
            .strip_prefix('-')
            .map(|d| d.strip_prefix("0x").map_or_else(|| d.parse::<i64>().ok(), |h| i64::from_str_radix(h, 16).ok()));
        n.flatten() == Some(1)
    };
    if targets.iter().any(|a| every_process(&a.text)) {
        part.add(C::SystemDestruction, "kill -1 signals every process");
    }
    part.add(C::Mutation, "kill signals processes");
}

pub fn systemctl(args: &[Arg], part: &mut Part) {
    // Options that take a value come before the verb (`-s KILL`, `-H host`, `-M machine`).
    let verb = skip_options(
        args,
        "sHMtpnoP",
        &["signal", "host", "machine", "type", "property", "lines", "output", "kill-whom", "root", "job-mode"],
    )
    .first()
    .map(|a| a.text.as_str())
    .unwrap_or("");
    const STOPS_THE_MACHINE: [&str; 8] =
        ["reboot", "poweroff", "halt", "kexec", "rescue", "emergency", "shutdown", "soft-reboot"];
    if args.iter().any(|a| {
        STOPS_THE_MACHINE.iter().any(|t| a.text.trim_end_matches(".target") == *t && a.text.ends_with(".target"))
    }) {
        part.add(C::SystemDestruction, "systemctl starts a target that stops the machine");
    }
    match verb {
        "poweroff" | "reboot" | "halt" | "kexec" | "suspend" | "hibernate" | "emergency" | "rescue" | "isolate"
        | "default" | "soft-reboot" => part.add(C::SystemDestruction, format!("systemctl {verb}")),
        "" | "status" | "show" | "cat" | "help" | "list-units" | "list-unit-files" | "list-timers" | "list-sockets"
        | "list-dependencies" | "list-jobs" | "is-active" | "is-enabled" | "is-failed" | "is-system-running" => {
            part.add(C::ReadOnly, "")
        }
        _ => part.add(C::Mutation, format!("systemctl {verb}")),
    }
}

pub fn ip(an: &mut Analyzer, args: &[Arg], part: &mut Part) {
    let words: Vec<&str> = args.iter().filter(|a| !a.text.starts_with('-')).map(|a| a.text.as_str()).collect();
    // iproute2 takes any prefix of an object or verb: `ip n e`, `ip netns exe`.
    let is = |w: Option<&&str>, full: &str| w.is_some_and(|w| !w.is_empty() && full.starts_with(*w));
    if is(words.first(), "netns") && is(words.get(1), "exec") {
        part.add(C::NamespaceEscape, "ip netns exec enters a network namespace");
        if let Some(exec) = words.get(1)
            && let Some(pos) = args.iter().position(|a| a.text == *exec)
        {
            argv(an, args.get(pos + 2..).unwrap_or(&[]), None, part);
        }
        return;
    }
    if words.first().is_some_and(|w| w.len() < 3) || words.len() > 2 {
        // Abbreviated (`ip l s eth0 down`) or with arguments: more than a listing.
        if !words.iter().skip(1).all(|w| matches!(*w, "show" | "list" | "ls" | "get" | "lst" | "sh" | "s" | "l"))
            || words.len() > 2
        {
            part.add(C::Mutation, "ip may change the network configuration");
            return;
        }
    }
    if words
        .iter()
        .any(|w| matches!(*w, "add" | "del" | "delete" | "set" | "flush" | "change" | "replace" | "append" | "attach"))
    {
        part.add(C::Mutation, "ip changes the network configuration");
    } else {
        part.add(C::ReadOnly, "");
    }
}
