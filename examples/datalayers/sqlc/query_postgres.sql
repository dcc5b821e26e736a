-- name: InsertOrder :exec
INSERT INTO orders (id, amount) VALUES ($1, $2);
