//! A Rust MPI application (rsmpi) that knows nothing of SCR, for transparent mode: `std::fs`
//! checkpoints `ckpt.<step>/rank_<r>.dat` (`open64`), `fs::metadata` (`statx`), a "latest"
//! pointer renamed into place, restart verified byte by byte.
//! Usage: preload_rust DIR STEPS [CRASH_AT]
use std::fs;
use std::io::Write;
use std::path::PathBuf;

use mpi::collective::SystemOperation;
use mpi::traits::*;

fn content(step: usize, rank: usize) -> Vec<u8> {
    (0..30000).map(|i| ((i * 31 + step * 7 + rank * 13) & 0xff) as u8).collect()
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(&args[1]);
    let steps: usize = args[2].parse().unwrap();
    let crash_at: Option<usize> = args.get(3).map(|s| s.parse().unwrap());
    let file = |step: usize| dir.join(format!("ckpt.{step}")).join(format!("rank_{rank}.dat"));

    let latest = dir.join("latest");
    let start: usize = fs::read_to_string(&latest).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    if start > 0 {
        let want = content(start, rank);
        let ok = fs::metadata(file(start)).map(|m| m.len() == want.len() as u64).unwrap_or(false)
            && fs::read(file(start)).map(|b| b == want).unwrap_or(false);
        let mut all = 0i32;
        world.all_reduce_into(&(ok as i32), &mut all, SystemOperation::min());
        if rank == 0 {
            println!("RESTARTED {start} {}", if all == 1 { "verified" } else { "CORRUPT" });
        }
    } else if rank == 0 {
        println!("NO_RESTART");
    }
    for step in start + 1..=steps {
        if Some(step) == crash_at && rank == size - 1 {
            std::process::exit(9);
        }
        world.barrier();
        if step % 2 == 1 {
            continue;
        }
        fs::create_dir_all(dir.join(format!("ckpt.{step}"))).unwrap();
        let mut f = fs::File::create(file(step)).unwrap();
        f.write_all(&content(step, rank)).unwrap();
        f.sync_all().unwrap();
        drop(f);
        world.barrier();
        if rank == 0 {
            fs::write(dir.join("latest.tmp"), format!("{step}\n")).unwrap();
            fs::rename(dir.join("latest.tmp"), &latest).unwrap();
            println!("CHECKPOINT {step}");
        }
    }
    if rank == 0 {
        println!("DONE");
    }
}
