-- The live members, which Assign shares the key partitions among.
SELECT member FROM /* TEMPLATE: relays */ WHERE until > now() ORDER BY member
