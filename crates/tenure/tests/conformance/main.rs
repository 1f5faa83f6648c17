//! The conformance suite: every test here runs once per backend (SQLite always; PostgreSQL
//! and MariaDB/MySQL where their servers are, and always under `CI=true`), and once more on
//! PostgreSQL through PgBouncer in transaction mode (`?pooler=transaction`, no LISTEN:
//! followers poll; `TENURE_TEST_PGBOUNCER_URL`, started by `scripts/pgbouncer.sh start`).

mod bounds;
mod candidates;
#[path = "../common/mod.rs"]
mod common;
mod consul;
mod consul_contracts;
mod elector;
mod epochs;
mod fence;
mod lock_history;
mod locks;
mod ops;
mod schedule;
mod spread;
mod spread_bands;
mod spread_cost;
mod spread_failing;
mod spread_names;
mod spread_pause;
mod spread_stall;
mod stall;
mod stalling;

use fence::fence_tests;
use stall::stall_tests;

macro_rules! conformance {
    ($backend:ident, $kind:expr, [$($module:ident :: $test:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if let Some(store) = crate::common::store($kind).await {
                        crate::$module::$test(store).await;
                    }
                }
            )*
        }
    };
}

macro_rules! for_every_backend {
    ($($tests:tt)*) => {
        conformance!(sqlite, tenure::BackendKind::Sqlite, $($tests)*);
        conformance!(postgres, tenure::BackendKind::Postgres, $($tests)*);
        conformance!(mysql, tenure::BackendKind::MySql, $($tests)*);
        conformance!(pgbouncer, crate::common::Target::PgBouncer, $($tests)*);
    };
}

for_every_backend!([
    ops::acquire_renew_and_leader,
    ops::release_and_stale_release,
    ops::release_at_least,
    ops::stale_renew_leaves_successor,
    ops::demote_keeps_lock_delay,
    ops::graceful_handover,
    ops::handover_reservation_lapses,
    ops::immediate_handover,
    ops::unadopted_forced_grant_released,
    ops::pause_and_resume,
    ops::list_history_and_errors,
    ops::terms_strictly_increase,
    ops::schema_switch_and_bad_connections,
    elector::elector_leads_renews_and_releases_on_shutdown,
    elector::electors_race_with_at_most_one_leader,
    elector::failover_after_crash,
    elector::graceful_release_is_prompt,
    elector::demote_reaches_the_leader,
    elector::restart_raises_the_term,
    elector::local_pause_and_resume,
    elector::cluster_pause_stops_everyone,
    elector::handover_waits_for_the_work_to_stop,
    locks::lock_excludes_and_release_hands_on,
    locks::lock_at_least_holds_the_name,
    locks::lock_stale_release_is_harmless,
    locks::lock_keep_alive_and_drop,
    locks::lock_lost_when_paused,
    locks::lock_election_mode,
    locks::semaphore_limits_holders,
    locks::lock_waits_without_a_bound,
    lock_history::lock_cycle_leaves_no_history,
    lock_history::lock_records_every_cycle_when_asked,
    lock_history::lock_takeover_and_admin_events_are_recorded,
    lock_history::lock_release_wakes_and_acquisition_does_not,
    lock_history::election_records_and_announces_every_cycle,
    schedule::schedule_runs_each_tick_once,
    schedule::schedule_stops_when_asked,
    consul::consul_acquire_release_is_the_lease,
    consul::consul_destroy_keeps_lock_delay,
    consul::consul_expired_session_loses_its_lock,
    consul::consul_heartbeat_and_demote,
    consul::consul_cas_delete_and_behavior,
    consul::consul_lock_index_is_the_term,
    consul::consul_racing_writers_have_one_winner,
    epochs::terms_end_with_their_epoch,
    candidates::candidates_register_follow_and_leave,
    candidates::failover_picks_the_best_live_candidate,
    candidates::a_better_candidate_takes_the_lead_by_handover,
    candidates::equal_priorities_never_hand_over,
    candidates::a_leader_stepping_down_wakes_its_follower,
    candidates::an_unmigrated_hand_wrapped_store_names_the_missing_table,
    spread::spread_settles_rebalances_and_never_doubles,
    spread::spread_members_sharing_an_id_never_share_a_shard,
    spread::spread_assignment_is_one_read,
    spread_names::spread_refuses_a_group_named_like_a_lease,
    spread_names::spread_counts_no_elector_of_its_name_as_a_member,
    spread_names::spread_names_hold_for_consul_and_a_vacant_lease_gives_way,
    spread_pause::spread_pause_stops_every_shard_until_resumed,
    spread_pause::spread_a_paused_group_stays_paused_whatever_joins,
    spread_bands::spread_members_with_different_ns_own_every_shard,
    spread_cost::spread_costs_one_transaction_per_interval,
    spread_cost::spread_a_million_shards_cost_their_live_rows,
    spread_failing::spread_a_first_tick_failing_half_way_writes_nothing,
    spread_failing::spread_a_renewal_failing_half_way_ends_every_belief_by_its_deadline,
    spread_failing::spread_two_members_creating_one_shard_never_both_own_it,
    spread_stall::spread_a_stalled_member_stops_before_its_shards_move,
    bounds::release_at_least_is_bounded,
    bounds::lock_at_least_is_bounded,
    consul_contracts::consul_admin_changes_move_the_index,
    consul_contracts::consul_expiry_moves_the_index,
    consul_contracts::consul_step_down_moves_the_index,
    consul_contracts::consul_stale_release_is_refused,
    consul_contracts::consul_expired_session_cannot_release,
]);

fence_tests!(
    fence_sqlite,
    tenure::backend::sqlite::SqliteBackend,
    sqlx::Sqlite,
    tenure::BackendKind::Sqlite
);
fence_tests!(
    fence_postgres,
    tenure::backend::postgres::PostgresBackend,
    sqlx::Postgres,
    tenure::BackendKind::Postgres
);
fence_tests!(
    fence_mysql,
    tenure::backend::mysql::MySqlBackend,
    sqlx::MySql,
    tenure::BackendKind::MySql
);
fence_tests!(
    fence_pgbouncer,
    tenure::backend::postgres::PostgresBackend,
    sqlx::Postgres,
    common::Target::PgBouncer
);

stall_tests!(
    stall_postgres,
    tenure::backend::postgres::PostgresBackend,
    tenure::BackendKind::Postgres,
    "$1"
);
stall_tests!(
    stall_pgbouncer,
    tenure::backend::postgres::PostgresBackend,
    common::Target::PgBouncer,
    "$1"
);
stall_tests!(
    stall_mysql,
    tenure::backend::mysql::MySqlBackend,
    tenure::BackendKind::MySql,
    "?"
);
