//! `ringctl`: the command-line tool for slot rings (work in progress: see the ringctl issue).
fn main() {
    eprintln!("ringctl: not implemented yet");
    std::process::exit(2);
}
