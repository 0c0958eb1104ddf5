//! Logging cost of the generated Rust stub: each of THREADS threads logs N
//! `Loupe::App::Progress` events (the payload bench/trace_cost.py uses for
//! C and LTTng-UST) and the mean ns/event per thread is printed. Tracing is
//! on when $LOUPE_TRACE_SHM names a buffer (run it under `loupe trace record`).
//! Usage: trace_bench N [THREADS]

#[path = "../../../sdk/rust/loupe_events.rs"]
mod loupe_events;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1).clamp(1, 64);
    let per: Vec<f64> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let t0 = loupe_trace::buffer::now();
                for i in 0..n {
                    loupe_events::loupe_app_progress(i, 1.0, "bench", &[1, -1]);
                }
                (loupe_trace::buffer::now() - t0) as f64 / n as f64
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    println!("{:.2} ns/event", per.iter().sum::<f64>() / per.len() as f64);
}
