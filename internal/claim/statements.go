package claim

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/rowstate"
	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
	"github.com/pgoutbox/outbox/lease"
)

// statements are a Claimer's SQL, rendered from sql/*.sql by New once per
// Claimer (render.go says how). The statements that select rows in a CTE
// and then update exactly those are rendered twice, once per kind of row
// address (sqlname.RowAddress): Claimer.rows is one of plain and
// partitioned.
type statements struct {
	plan        sqlfile.Stmt[sqlfile.NoArgs] // Plan
	asyncCommit sqlfile.Stmt[sqlfile.NoArgs] // AsyncCommit
	beat        sqlfile.Stmt[beatArgs]
	hold        sqlfile.Stmt[holdArgs]
	sweep       sqlfile.Stmt[sqlfile.NoArgs]
	holdsReset  sqlfile.Stmt[sqlfile.NoArgs]
	unregister  sqlfile.Stmt[holderArgs]
	requeue     sqlfile.Stmt[requeueArgs]
	partitioned sqlfile.Stmt[tableArgs]      // whether the table is partitioned
	generation  sqlfile.Stmt[sqlfile.NoArgs] // read after each claim
	holds       sqlfile.Stmt[sqlfile.NoArgs] // read before each claim
	wakeOwners  sqlfile.Stmt[wakeOwnersArgs] // a shared poll (Claimer.PollShared)
	advanceSeq  sqlfile.Stmt[sqlfile.NoArgs]
	advanceVXID sqlfile.Stmt[sqlfile.NoArgs]
	advance     sqlfile.Stmt[advanceArgs]
	join        sqlfile.Stmt[joinArgs]
	members     sqlfile.Stmt[sqlfile.NoArgs]
	owners      sqlfile.Stmt[sqlfile.NoArgs]
	legacy      sqlfile.Stmt[sqlfile.NoArgs]
	move        sqlfile.Stmt[moveArgs]
	leave       sqlfile.Stmt[leaveArgs]
	// Static membership (a RelayID set): see TakeOver in sql/membership.sql.
	lockMember   sqlfile.Stmt[lockMemberArgs]
	memberShared sqlfile.Stmt[keyArgs]
	rejoin       sqlfile.Stmt[rejoinArgs]
	declare      sqlfile.Stmt[declareArgs]
	undeclare    sqlfile.Stmt[incarnationArgs]

	plainRows, partitionedRows *rowStatements
}

// rowStatements are the statements that name rows by address.
type rowStatements struct {
	// claim probes the order guard with scalar bounds; claimHeld with row
	// comparisons, while rows are held behind a dead letter
	// (rowstate.States.Waiting).
	claim     sqlfile.Stmt[claimArgs]
	claimHeld sqlfile.Stmt[claimArgs]
	mark      sqlfile.Stmt[settleArgs]
	extend    sqlfile.Stmt[extendArgs]
	release   sqlfile.Stmt[releaseArgs]
	dead      sqlfile.Stmt[deadArgs]
	// takeOver is a static member's first join (sql/membership.sql).
	takeOver sqlfile.Stmt[takeOverArgs]
}

// The arguments of the statements, by name: each field's position is its
// $n (render.go).
type (
	beatArgs struct {
		Holder  string `arg:"holder"`
		LeaseMS int64  `arg:"lease_ms"`
	}
	// holdArgs: DelayMS nil holds forever.
	holdArgs struct {
		DelayMS *int64 `arg:"delay_ms"`
	}
	holderArgs struct {
		Holder string `arg:"holder"`
	}
	// requeueArgs: IDs nil requeues every dead letter.
	requeueArgs struct {
		IDs []string `arg:"ids"`
	}
	tableArgs struct {
		Table string `arg:"table"`
	}
	// advanceArgs: OwnedMask nil counts every row.
	advanceArgs struct {
		Floor     int64  `arg:"floor"`
		OwnedMask []bool `arg:"owned_mask"`
	}
	claimArgs struct {
		BatchSize int       `arg:"batch_size"`
		LeaseMS   int64     `arg:"lease_ms"`
		Holder    string    `arg:"holder"`
		Token     uuid.UUID `arg:"token"`
		// ScanFrom is where this claim scans from: the floor, the resume
		// point after the last claim while draining (resume.go), or 0 for
		// a rescan.
		ScanFrom int64  `arg:"scan_from"`
		Floor    int64  `arg:"floor"`
		Member   string `arg:"member"`
		// Owned is the mask of the partitions the claim takes rows of,
		// indexed by partition (owner.claimMask); OwnsAny whether any is
		// set; Generation the generation the mask holds at.
		Owned      []bool `arg:"owned"`
		OwnsAny    bool   `arg:"owns_any"`
		Generation int64  `arg:"generation"`
		ForceGuard bool   `arg:"force_guard"`
		MaxBytes   int32  `arg:"max_bytes"`
		// Started is a static member's incarnation (nil: not static).
		Started *time.Time `arg:"started"`
		// Requeued is the order guard's 'requeued' entry the resume point
		// was set under (resume.requeued): a claim that finds another
		// scans from the floor.
		Requeued int64 `arg:"requeued"`
	}
	// wakeOwnersArgs: Mine is this relay's wake mask (may be empty);
	// Named the payload's prefix, NamedAll the payload past MaxNamed
	// partitions.
	wakeOwnersArgs struct {
		ScanLimit int64  `arg:"scan_limit"`
		Mine      []bool `arg:"mine"`
		Channel   string `arg:"channel"`
		Named     string `arg:"named"`
		NamedAll  string `arg:"named_all"`
		MaxNamed  int64  `arg:"max_named"`
	}
	// settleArgs: CreatedFrom and CreatedTo bound the rows' created_at
	// (the claim's, createdRanges; infinite when unknown), so that on a
	// time-partitioned table only the partitions of that range are
	// searched.
	settleArgs struct {
		Seqs        []int64            `arg:"seqs"`
		Token       uuid.UUID          `arg:"token"`
		CreatedFrom pgtype.Timestamptz `arg:"created_from"`
		CreatedTo   pgtype.Timestamptz `arg:"created_to"`
	}
	extendArgs struct {
		Seqs    []int64    `arg:"seqs"`
		Token   uuid.UUID  `arg:"token"`
		LeaseMS int64      `arg:"lease_ms"`
		Member  string     `arg:"member"`
		Started *time.Time `arg:"started"`
	}
	releaseArgs struct {
		Seqs       []int64   `arg:"seqs"`
		Token      uuid.UUID `arg:"token"`
		RetryMS    int64     `arg:"retry_ms"`
		AttemptInc int       `arg:"attempt_inc"`
		LastError  *string   `arg:"last_error"`
	}
	deadArgs struct {
		Seqs       []int64   `arg:"seqs"`
		Token      uuid.UUID `arg:"token"`
		Hold       bool      `arg:"hold"`
		AttemptInc int       `arg:"attempt_inc"`
		LastError  string    `arg:"last_error"`
	}
	joinArgs struct {
		Member  string `arg:"member"`
		RelayID string `arg:"relay_id"`
		LeaseMS int64  `arg:"lease_ms"`
		Channel string `arg:"channel"`
	}
	moveArgs struct {
		Member  string     `arg:"member"`
		Acquire []int32    `arg:"acquire"`
		Release []int32    `arg:"release"`
		Started *time.Time `arg:"started"`
		Channel string     `arg:"channel"`
	}
	leaveArgs struct {
		Member  string     `arg:"member"`
		Keep    []int32    `arg:"keep"`
		Gone    bool       `arg:"gone"`
		Started *time.Time `arg:"started"`
		Channel string     `arg:"channel"`
	}
	lockMemberArgs struct {
		TimeoutMS int64  `arg:"timeout_ms"`
		Key       string `arg:"key"`
		Member    string `arg:"member"`
	}
	keyArgs struct {
		Key string `arg:"key"`
	}
	rejoinArgs struct {
		Member  string     `arg:"member"`
		RelayID string     `arg:"relay_id"`
		LeaseMS int64      `arg:"lease_ms"`
		Started *time.Time `arg:"started"`
		Channel string     `arg:"channel"`
	}
	declareArgs struct {
		Incarnation string `arg:"incarnation"`
		LeaseMS     int64  `arg:"lease_ms"`
	}
	incarnationArgs struct {
		Incarnation string `arg:"incarnation"`
	}
	takeOverArgs struct {
		Member      string `arg:"member"`
		RelayID     string `arg:"relay_id"`
		LeaseMS     int64  `arg:"lease_ms"`
		Incarnation string `arg:"incarnation"`
		TableKey    string `arg:"table_key"`
		Channel     string `arg:"channel"`
	}
)

// tableSlots returns the slots naming table (optionally schema-qualified)
// and the tables beside it, quoted: table, table_literal (the quoted name
// as a string literal, for regclass), guard, relays, partitions,
// partitioning.
func tableSlots(table string) map[string]string {
	return map[string]string{
		"table":         sqlname.Quote(table),
		"table_literal": sqlname.Literal(sqlname.Quote(table)),
		"guard":         sqlname.OrderGuard(table),
		"relays":        sqlname.Beside(table, "_relays"),
		"partitions":    sqlname.Beside(table, "_partitions"),
		"partitioning":  sqlname.Beside(table, "_partitioning"),
	}
}

// claimerSlots returns the slots of cfg's statements that do not depend
// on the row address: tableSlots; the configured columns (id,
// aggregate_id, event_type, payload) and aggregate_type_o (that column
// on alias o as text, or NULL::text); key_partition_o (a row's key
// partition on alias o); plan_settings (plan_settings.SQL); live_o and
// lease_free_o (States on alias o).
func claimerSlots(cfg lease.Config) (map[string]string, error) {
	s := tableSlots(cfg.Table)
	col := sqlname.Column
	s["id"], s["aggregate_id"] = col(cfg.Columns.ID), col(cfg.Columns.AggregateID)
	s["event_type"], s["payload"] = col(cfg.Columns.EventType), col(cfg.Columns.Payload)
	s["aggregate_type_o"] = "NULL::text"
	if cfg.Columns.AggregateType != "" {
		s["aggregate_type_o"] = "o." + col(cfg.Columns.AggregateType) + "::text"
	}
	s["key_partition_o"] = `coalesce(o.key_partition, ` + sqlname.Beside(cfg.Table, "_key_partition") + `(o.` + s["aggregate_id"] + `::text))`
	plan, err := queries.Fill("PlanSettings", s)
	if err != nil {
		return nil, err
	}
	s["plan_settings"] = plan
	s["members_payload"] = sqlname.Literal(config.MembersPayload)
	st := rowstate.NewStates(cfg.Table, cfg.Columns.AggregateID)
	s["live_o"], s["lease_free_o"] = st.Live("o"), st.LeaseFree("o")
	guardFrom, err := queries.Fill("ClaimGuardFrom", s)
	if err != nil {
		return nil, err
	}
	s["waiting_o"] = st.Waiting("o", "@holder", guardFrom, "(SELECT scan FROM lo)", false)
	s["waiting_by_row_o"] = st.Waiting("o", "@holder", guardFrom, "(SELECT scan FROM lo)", true)
	s["held_behind_o"] = st.HeldBehind("o")
	return s, nil
}

// newStatements renders cfg's statements.
func newStatements(cfg lease.Config) (*statements, error) {
	s, err := claimerSlots(cfg)
	if err != nil {
		return nil, err
	}
	st := &statements{}
	r := sqlfile.Renderer{Set: queries, Slots: s}
	sqlfile.Into(&r, &st.plan, "Plan")
	sqlfile.Into(&r, &st.asyncCommit, "AsyncCommit")
	sqlfile.Into(&r, &st.beat, "Beat")
	sqlfile.Into(&r, &st.hold, "Hold")
	sqlfile.Into(&r, &st.sweep, "Sweep")
	sqlfile.Into(&r, &st.holdsReset, "HoldsReset")
	sqlfile.Into(&r, &st.unregister, "Unregister")
	sqlfile.Into(&r, &st.requeue, "Requeue")
	sqlfile.Into(&r, &st.partitioned, "Partitioned")
	sqlfile.Into(&r, &st.generation, "Generation")
	sqlfile.Into(&r, &st.holds, "Holds")
	sqlfile.Into(&r, &st.wakeOwners, "WakeOwners")
	sqlfile.Into(&r, &st.advanceSeq, "AdvanceSeq")
	sqlfile.Into(&r, &st.advanceVXID, "AdvanceVXID")
	sqlfile.Into(&r, &st.advance, "Advance")
	sqlfile.Into(&r, &st.join, "Join")
	sqlfile.Into(&r, &st.members, "Members")
	sqlfile.Into(&r, &st.owners, "Owners")
	sqlfile.Into(&r, &st.legacy, "Legacy")
	sqlfile.Into(&r, &st.move, "Move")
	sqlfile.Into(&r, &st.leave, "Leave")
	sqlfile.Into(&r, &st.lockMember, "LockMember")
	sqlfile.Into(&r, &st.memberShared, "MemberShared")
	sqlfile.Into(&r, &st.rejoin, "Rejoin")
	sqlfile.Into(&r, &st.declare, "Declare")
	sqlfile.Into(&r, &st.undeclare, "Undeclare")
	st.plainRows = newRowStatements(&r, cfg, false)
	st.partitionedRows = newRowStatements(&r, cfg, true)
	if r.Err != nil {
		return nil, fmt.Errorf("lease: render statements: %w", r.Err)
	}
	return st, nil
}

// newRowStatements renders the statements naming rows by address, for a
// partitioned table or not: slots row_address and row_address_o (what
// the CTE selects, unaliased or on alias o), match_candidates,
// match_settled and match_settled_o (the end of the UPDATE, on alias o or
// unaliased, matching the rows of that CTE).
func newRowStatements(r *sqlfile.Renderer, cfg lease.Config, partitioned bool) *rowStatements {
	addr := sqlname.NewRowAddress(cfg.Table, cfg.Columns.ID, partitioned)
	match := func(a, cte string) string { return strings.TrimPrefix(addr.Match(a, cte), "\n") }
	// created_bound: on a partitioned table the rows' created_at range,
	// by which PostgreSQL prunes the partitions searched; on a plain table
	// a one-time check of the same arguments, which costs nothing.
	bound := "AND @created_from::timestamptz <= @created_to::timestamptz"
	if partitioned {
		bound = "AND created_at BETWEEN @created_from::timestamptz AND @created_to::timestamptz"
	}
	s := sqlfile.With(r.Slots, "created_bound", bound, "row_address", addr.Select(""), "row_address_o", addr.Select("o"),
		"match_candidates", match("o", "candidates"), "match_settled", match("", "settled"), "match_settled_o", match("o", "settled"),
		"match_held", match("o", "held"))
	rr := sqlfile.Renderer{Set: queries, Slots: s}
	rs := &rowStatements{}
	sqlfile.Into(&rr, &rs.claim, "Claim")
	held := sqlfile.Renderer{Set: queries, Slots: sqlfile.With(s, "waiting_o", s["waiting_by_row_o"])}
	sqlfile.Into(&held, &rs.claimHeld, "Claim")
	if held.Err != nil && rr.Err == nil {
		rr.Err = held.Err
	}
	sqlfile.Into(&rr, &rs.mark, "Mark")
	sqlfile.Into(&rr, &rs.extend, "Extend")
	sqlfile.Into(&rr, &rs.release, "Release")
	sqlfile.Into(&rr, &rs.dead, "DeadLetter")
	sqlfile.Into(&rr, &rs.takeOver, "TakeOver")
	if rr.Err != nil && r.Err == nil {
		r.Err = rr.Err
	}
	return rs
}
