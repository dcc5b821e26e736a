// Package schema holds the ent schema of the example's orders table.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// Order is an order of the datalayers examples: a business row written
// beside its outbox message.
type Order struct {
	ent.Schema
}

// Annotations names the table "orders", as the other examples do.
func (Order) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "orders"}}
}

// Fields of the Order: the id is set by the caller.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.Int64("amount"),
	}
}
