//! The conformance suite: every test here runs once per backend (SQLite always; PostgreSQL
//! and MariaDB/MySQL where their servers are, and always under `CI=true`), and once more on
//! PostgreSQL through PgBouncer in transaction mode (`?pooler=transaction`, no LISTEN:
//! followers poll; `TENURE_TEST_PGBOUNCER_URL`, started by `scripts/pgbouncer.sh start`).

mod bounds;
mod candidates;
mod candidates_flap;
mod candidates_handover;
mod candidates_lapse;
mod candidates_purge;
mod candidates_schema;
#[path = "../common/mod.rs"]
mod common;
mod consul;
mod consul_contracts;
mod consul_index;
mod elector;
mod epochs;
mod etcd_fence;
mod etcd_group;
mod etcd_group_failures;
mod etcd_kv;
mod etcd_leases;
mod etcd_log;
mod etcd_model;
mod etcd_overview;
mod etcd_recipes;
mod etcd_support;
mod etcd_txn;
mod etcd_writes;
mod fence;
mod lock_history;
mod locks;
mod locks_many;
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

use etcd_fence::etcd_fence_tests;
use fence::fence_tests;
use stall::stall_tests;

/// Eight tests at once, unless `--test-threads` or `RUST_TEST_THREADS` says otherwise: the
/// suite's tests mostly wait (for a ttl, a poll interval, the database's clock), and two at a
/// time, libtest's default on a 2-core machine, left the machine over 90 % idle for 8½
/// minutes; eight took 2–2½. (libtest reads the variable when its `main` starts, after this.)
#[ctor::ctor(unsafe)]
fn eight_at_once() {
    if std::env::var_os("RUST_TEST_THREADS").is_none() {
        std::env::set_var("RUST_TEST_THREADS", "8");
    }
}

/// The longest a test may run: the slowest takes about a minute on a busy machine. A test
/// that hangs (an await that never ends) fails after this, naming itself, instead of holding
/// the whole run until CI's limit.
pub(crate) const TEST_BOUND: std::time::Duration = std::time::Duration::from_secs(300);

macro_rules! conformance {
    ($backend:ident, $kind:expr, [$($module:ident :: $test:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if let Some(store) = crate::common::store($kind).await {
                        tokio::time::timeout(crate::TEST_BOUND, crate::$module::$test(store))
                            .await
                            .expect("the test ended within TEST_BOUND: it hangs");
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
    locks_many::lock_many_takes_the_free_names_only,
    locks_many::lock_many_racing_single_locks_never_doubles,
    locks_many::lock_many_guards_renew_and_are_lost_like_single_ones,
    locks_many::lock_many_refuses_a_spreading_groups_names,
    lock_history::lock_cycle_leaves_no_history,
    lock_history::lock_records_every_cycle_when_asked,
    lock_history::lock_takeover_and_admin_events_are_recorded,
    lock_history::lock_release_wakes_and_acquisition_does_not,
    lock_history::election_records_and_announces_every_cycle,
    schedule::schedule_runs_each_tick_once,
    schedule::schedule_stops_when_asked,
    schedule::schedule_first_tick_survives_a_leader_change,
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
    candidates_lapse::a_crashed_better_candidate_costs_the_leader_its_cadence_at_most,
    candidates_flap::a_restarted_better_candidate_settles_again,
    candidates_flap::a_better_candidate_with_a_new_id_each_run_settles_each_time,
    candidates_flap::a_better_candidate_whose_tenures_end_by_expiry_backs_off,
    candidates_purge::a_registry_full_of_crashed_candidates_is_purged_in_bounded_batches,
    candidates_schema::a_registry_of_an_older_build_is_brought_up_to_date,
    candidates_handover::an_operator_handover_goes_to_a_live_candidate_and_stands,
    candidates_handover::a_demoted_leader_stays_a_live_candidate_while_it_holds_off,
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
    consul_index::consul_a_key_answers_with_its_own_index,
    consul_index::consul_a_write_that_changes_nothing_moves_nothing,
    consul_index::consul_a_prefix_answers_with_its_changes_and_deletes,
    consul_index::consul_session_reads_answer_with_the_sessions_index,
    consul_index::consul_a_ttl_session_lives_twice_its_ttl,
    etcd_kv::etcd_put_versions_and_revisions,
    etcd_kv::etcd_range_options,
    etcd_kv::etcd_delete_range,
    etcd_kv::etcd_past_revisions_and_compaction,
    etcd_kv::etcd_keys_are_bytes,
    etcd_txn::etcd_txn_compares_and_branches,
    etcd_txn::etcd_txn_nested,
    etcd_txn::etcd_txn_refusals_write_nothing,
    etcd_leases::etcd_lease_grant_keep_alive_revoke,
    etcd_leases::etcd_lease_expires_by_the_database_clock,
    etcd_log::etcd_events_in_whole_revisions,
    etcd_log::etcd_revisions_are_gapless_under_concurrent_writers,
    etcd_log::etcd_members_join_heartbeat_and_leave,
    etcd_recipes::etcd_lock_one_holder_and_the_next_on_unlock,
    etcd_recipes::etcd_lock_holder_lease_end_wakes_the_next,
    etcd_recipes::etcd_lock_waiter_that_gives_up_leaves_no_key,
    etcd_recipes::etcd_election_campaign_observe_and_resign,
    etcd_recipes::etcd_write_signals_its_own_store,
    etcd_model::etcd_matches_the_reference,
    etcd_overview::etcd_overview_shows_leases_and_recipe_owners,
    etcd_overview::etcd_overview_follows_the_database_clock,
    etcd_overview::etcd_size_counts_the_layers_tables,
    etcd_writes::etcd_a_put_judges_its_lease_after_taking_the_revision,
    etcd_writes::etcd_a_write_signals_other_stores,
    etcd_group::etcd_writes_queued_together_commit_as_one,
    etcd_group::etcd_a_refused_write_leaves_its_batch,
    etcd_group_failures::etcd_a_batch_that_fails_half_way_writes_nothing,
    etcd_group_failures::etcd_a_refused_statement_runs_its_write_alone,
    etcd_group_failures::etcd_a_batch_refused_twice_runs_each_write_alone,
    etcd_group_failures::etcd_a_refusal_is_answered_from_committed_writes_only,
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

etcd_fence_tests!(etcd_fence_sqlite, sqlx::Sqlite, tenure::BackendKind::Sqlite);
etcd_fence_tests!(
    etcd_fence_postgres,
    sqlx::Postgres,
    tenure::BackendKind::Postgres
);
etcd_fence_tests!(etcd_fence_mysql, sqlx::MySql, tenure::BackendKind::MySql);
etcd_fence_tests!(
    etcd_fence_pgbouncer,
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
