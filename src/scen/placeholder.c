/* Scenarios layer placeholder until the scenario sources land. */
int pd_scen_placeholder_(void);
int pd_scen_placeholder_(void) { return 0; }
