-- A relay of an older version, without key partitions, that holds leases
-- on the table: its holder, or '' when there is none. Such a relay
-- registers its holders in the order guard as 'relay:<holder>' too, but
-- is no member.
SELECT coalesce((SELECT substr(g.key, 7) FROM /* TEMPLATE: guard */ g
  WHERE g.key LIKE 'relay:%' AND g.until > now()
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: relays */ r WHERE g.key = 'relay:' || r.member OR g.key LIKE 'relay:' || r.member || '.%')
    AND EXISTS (SELECT 1 FROM /* TEMPLATE: table */ o WHERE o.published_at IS NULL AND o.locked_by = substr(g.key, 7) AND o.locked_until > now())
  LIMIT 1), '')
