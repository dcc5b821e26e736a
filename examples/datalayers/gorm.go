package datalayers

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outbox-go/outbox"
	"gorm.io/gorm"
)

// PlaceOrderGORM inserts o and its message in one GORM transaction.
func PlaceOrderGORM(ctx context.Context, db *gorm.DB, w *outbox.Writer[*sql.Tx], o Order) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&o).Error; err != nil {
			return err
		}
		sqlTx, err := GORMTx(tx)
		if err != nil {
			return err
		}
		return w.Write(ctx, sqlTx, orderPlaced(o))
	})
}

// GORMTx returns the *sql.Tx under a *gorm.DB handed to a db.Transaction
// callback (or returned by db.Begin). It fails for a *gorm.DB outside a
// transaction, or one whose dialector pools connections some other way.
func GORMTx(tx *gorm.DB) (*sql.Tx, error) {
	sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return nil, fmt.Errorf("datalayers: the *gorm.DB is not in a database/sql transaction (its pool is %T)", tx.Statement.ConnPool)
	}
	return sqlTx, nil
}
