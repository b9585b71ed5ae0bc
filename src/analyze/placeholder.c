/* Analyzer layer placeholder until the scenario sources land. */
int pd_analyze_placeholder_(void);
int pd_analyze_placeholder_(void) { return 0; }
