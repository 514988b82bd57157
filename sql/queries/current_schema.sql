-- The schema unqualified objects are created in (NULL when no schema of
-- the search_path exists) and the search_path: an unqualified table goes
-- there, and MissingSchemaError names the search_path when it is NULL.
SELECT current_schema(), current_setting('search_path')
