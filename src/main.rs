//! gavel binary: parses the command line and hands off to [`gavel::cli`].

#[cfg(all(not(target_env = "msvc"), not(feature = "system-allocator")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let cli = gavel::cli::parse();
    match gavel::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::exit(1);
        }
    }
}
