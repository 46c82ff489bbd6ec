//! Criterion: the command policy over the whole corpus, per mode. `cc-bench gate` gives
//! the same figure as lines per second with its p99.

use cc_policy::Mode;
use cc_policy::command::check;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

#[path = "../src/corpus.rs"]
mod corpus;
use corpus::corpus;

fn classify(c: &mut Criterion) {
    let lines = corpus();
    let mut group = c.benchmark_group("command policy corpus");
    group.throughput(Throughput::Elements(lines.len() as u64));
    for mode in [Mode::Chat, Mode::Plan] {
        group.bench_function(mode.as_str(), |b| {
            b.iter(|| {
                for line in &lines {
                    std::hint::black_box(check(std::hint::black_box(line), mode));
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, classify);
criterion_main!(benches);
