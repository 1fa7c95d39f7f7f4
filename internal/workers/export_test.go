package workers

// EntryKey and IndexKey give the tests the registry's keys.
func (r *Registry) EntryKey(id string) string { return r.entryKey(id) }
func (r *Registry) IndexKey() string          { return r.indexKey() }
