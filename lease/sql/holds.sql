-- Whether a row backs off after a failed publish or is held as a dead
-- letter ('holds' in the order guard), queued before the claim in the
-- claim's own transaction: read before the claim's snapshot, false means
-- that no such row lies below the claim's resume point (resume.go).
SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: guard */ g WHERE g.key = 'holds' AND g.until > now())
