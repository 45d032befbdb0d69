package cluster

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/orbitrun/orbit/internal/db"
)

// Session tables carry node_id and closed_at (migration 000018): the two
// functions below are what a module's Connections does with its own table.

// SessionsOpenByNode counts the rows of a session table with closed_at NULL
// for each of nodeIDs, through its (node_id, closed_at) index; nodes
// without any are absent. table is a constant of the calling module.
func SessionsOpenByNode(ctx context.Context, q db.Querier, table string, nodeIDs []string) (map[string]int, error) {
	out, err := db.QueryCounts(ctx, q, `SELECT node_id, COUNT(*) FROM `+table+`
		WHERE node_id IN (`+db.Placeholders(len(nodeIDs))+`) AND closed_at IS NULL GROUP BY node_id`, db.Args(nodeIDs)...)
	if err != nil {
		return nil, fmt.Errorf("cluster: count open %s: %w", table, err)
	}
	return out, nil
}

// SessionsCloseOfNode closes, in tx, the open rows of a session table that
// belong to nodeID, at at, and returns how many it closed.
func SessionsCloseOfNode(ctx context.Context, tx *sql.Tx, table, nodeID string, at time.Time) (int64, error) {
	res, err := tx.ExecContext(ctx, `UPDATE `+table+` SET closed_at = ? WHERE node_id = ? AND closed_at IS NULL`, at, nodeID)
	if err != nil {
		return 0, fmt.Errorf("cluster: close %s of node: %w", table, err)
	}
	return res.RowsAffected()
}
