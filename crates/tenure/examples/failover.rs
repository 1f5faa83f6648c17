//! Three electors on one SQLite file: the leader is killed without releasing, another takes
//! over after the ttl with a higher term; then the new leader releases gracefully and the
//! third takes over at once. Prints the timeline.
//!
//! ```text
//! cargo run -p tenure --example failover [-- DATABASE_URL]
//! ```

use std::time::Duration;
use tenure::{Elector, Role, Store, Timing};
use tokio::time::{sleep, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            let dir = std::env::temp_dir().join("tenure-example");
            std::fs::create_dir_all(&dir)?;
            format!("sqlite://{}", dir.join("failover.db").display())
        }
    };
    let store = Store::connect(&url).await?;
    let name = format!("example-{}", std::process::id());
    let timing = Timing::from_ttl(Duration::from_secs(2))?;
    println!("database {}  name {name}", store.url());
    println!(
        "ttl {:?}, renew every {:?}, safety margin {:?}\n",
        timing.ttl(),
        timing.renew_interval(),
        timing.safety_margin()
    );

    let start = Instant::now();
    let stamp = move || format!("{:>7.3}s", start.elapsed().as_secs_f64());
    let mut electors = Vec::new();
    for id in ["alpha", "bravo", "charlie"] {
        let elector = Elector::builder(store.clone(), &name)
            .candidate(id)
            .metadata(format!("{id}.internal:8080"))
            .timing(timing)
            .spawn()?;
        let mut role = elector.role();
        tokio::spawn(async move {
            while role.changed().await.is_ok() {
                let line = match &*role.borrow_and_update() {
                    Role::Leader { term, .. } => format!("leads with term {term}"),
                    Role::Follower { leader: Some(l) } => {
                        format!("follows {} (term {})", l.holder, l.term)
                    }
                    Role::Follower { leader: None } => "follows; nobody leads".to_string(),
                    Role::Unknown => "does not lead (unknown)".to_string(),
                    Role::Paused => "paused".to_string(),
                    Role::Stopped => "stopped".to_string(),
                };
                println!("{} {id:<8} {line}", stamp());
            }
        });
        electors.push(Some(elector));
    }

    let first = wait_for_leader(&electors).await;
    sleep(Duration::from_secs(1)).await;
    let victim = electors[first].take().expect("leader");
    println!(
        "{} ---- killing {} without a release (as a crash would)",
        stamp(),
        victim.candidate()
    );
    let killed_at = Instant::now();
    victim.abort();
    let second = wait_for_leader(&electors).await;
    println!(
        "{} ---- failover took {:.3}s (ttl {:?})",
        stamp(),
        killed_at.elapsed().as_secs_f64(),
        timing.ttl()
    );

    sleep(Duration::from_secs(1)).await;
    let guard = electors[second]
        .as_ref()
        .and_then(|e| e.current())
        .expect("leads");
    println!("{} ---- {} releases gracefully", stamp(), guard.candidate());
    let released_at = Instant::now();
    guard.release().await?;
    let third = wait_for_leader(&electors).await;
    println!(
        "{} ---- handover took {:.3}s",
        stamp(),
        released_at.elapsed().as_secs_f64()
    );
    let _ = third;

    sleep(Duration::from_millis(300)).await;
    println!("\nhistory of {name}, newest first:");
    for h in store.history(&name, 10).await? {
        println!(
            "  {}  term {:<2} {:<20} {:<8} {}",
            h.at,
            h.term,
            h.event,
            h.holder.unwrap_or_default(),
            h.detail
        );
    }
    for elector in electors.into_iter().flatten() {
        elector.shutdown().await;
    }
    Ok(())
}

async fn wait_for_leader(electors: &[Option<Elector>]) -> usize {
    loop {
        for (i, e) in electors.iter().enumerate() {
            if e.as_ref().is_some_and(|e| e.current().is_some()) {
                return i;
            }
        }
        sleep(Duration::from_millis(5)).await;
    }
}
