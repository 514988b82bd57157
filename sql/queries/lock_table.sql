-- Adopt locks the table first: adding the columns and constraints needs
-- the ACCESS EXCLUSIVE lock in the end, and a weaker lock taken on the way
-- (ALTER TABLE SET, CREATE TRIGGER) deadlocks with a producer that read
-- the table and then inserts into it.
LOCK TABLE /* TEMPLATE: table */ IN ACCESS EXCLUSIVE MODE
